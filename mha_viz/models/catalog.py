"""Which architectures this install can trace, read from the installed transformers (not a typed list).

A text model type is supported when its modeling file sends attention through transformers' attention
interface (where capture.py stands). What each one shows is read from the same file. VERIFIED names
the types that the test suite reproduces to 1e-5 from tiny random configs (tests/zoo.py; a test keeps
the two in step).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

VERIFIED = (
    "bert", "roberta", "xlm-roberta", "electra", "distilbert", "modernbert",
    "gpt2", "gpt_neox", "opt", "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
    "phi3", "phi", "olmo", "olmo2", "granite", "starcoder2", "cohere", "deepseek_v2", "deepseek_v3", "minicpm3",
    "gpt_oss", "mobilebert", "switch_transformers", "bitnet", "qwen3_next",
    "bart", "mbart", "marian", "t5",
)  # fmt: skip
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
    supported: bool
    features: tuple[str, ...]
    verified: bool


def catalog() -> list[Arch]:
    """Every text model type of the installed transformers, with whether mha-viz can trace it."""
    from transformers.models.auto import modeling_auto as ma
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    kinds: dict[str, str] = {}
    for mapping, kind in (  # first match wins: BART also has a masked-LM and a causal-LM class, BERT a causal one
        (ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, "encoder-decoder"),
        (ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES, "encoder"),
        (ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "decoder"),
    ):
        for model_type in mapping:
            kinds.setdefault(model_type, kind)
    speech = set(getattr(ma, "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", {}))  # whisper & co: not text models
    found = []
    for model_type, kind in sorted(kinds.items()):
        if model_type in speech:
            continue
        folder = model_type_to_module_name(model_type)
        try:
            spec = importlib.util.find_spec(f"transformers.models.{folder}.modeling_{folder}")
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.origin is None:
            continue
        with open(spec.origin, encoding="utf-8") as fh:
            source = fh.read()
        supported = "ALL_ATTENTION_FUNCTIONS.get_interface(" in source
        features = tuple(name for name, marks in FEATURES.items() if any(m in source for m in marks))
        if kind == "encoder-decoder":
            features = (*features, "cross-attention")
        found.append(Arch(model_type, kind, supported, features, model_type in VERIFIED))
    return found


def format_table(archs: list[Arch], show_unsupported: bool = False) -> str:
    """The catalog as aligned text lines (supported first; verified ones marked)."""
    shown = [a for a in archs if a.supported]
    lines = [
        f"{len(shown)} text architectures trace through transformers' attention interface "
        f"({sum(a.verified for a in shown)} reproduced to 1e-5 by the test suite, marked *):",
        f"  {'model type':<24}{'kind':<17}shows",
    ]
    for a in shown:
        mark = "*" if a.verified else " "
        lines.append(f"{mark} {a.model_type:<24}{a.kind:<17}{', '.join(a.features) or '-'}")
    missing = [a for a in archs if not a.supported]
    if show_unsupported:
        lines.append(f"not supported ({len(missing)}; their attention does not go through the interface):")
        lines.extend(f"  {a.model_type}" for a in missing)
    else:
        lines.append(f"{len(missing)} more text architectures are not supported (add --all to list them).")
    return "\n".join(lines)

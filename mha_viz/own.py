"""Own weights: initialise, embed tokens without a model, save and load as safetensors.

Safetensors only (never pickle). Loading checks the header before reading any tensor:
size caps, known names, dtypes, consistent shapes and offsets, then finite values of bounded size.
Any bad file raises MhaVizError (never another exception).
"""

from __future__ import annotations

import json
import math
import struct

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from mha_viz.config import INITS, MAX_ABS_WEIGHT, MAX_D_MODEL, MAX_FILE_BYTES, MAX_HEADER_BYTES, MAX_HEADS, MAX_SCALE
from mha_viz.edits import divisors
from mha_viz.trace import AttentionWeights, MhaVizError

FORMAT_TAG = "mha-viz-own-weights/1"
_ST_DTYPES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
_NAMES = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")


def check_size(d_model: int, n_heads: int) -> None:
    """Raise a clear error unless d_model and n_heads make a valid layer."""
    if not 1 <= d_model <= MAX_D_MODEL:
        raise MhaVizError(f"d_model must be between 1 and {MAX_D_MODEL}, got {d_model}")
    if not 1 <= n_heads <= min(MAX_HEADS, d_model) or d_model % n_heads:
        valid = [h for h in divisors(d_model) if h <= MAX_HEADS]
        raise MhaVizError(
            f"d_model {d_model} is not divisible by {n_heads} heads; choose one of {', '.join(map(str, valid))}"
        )


def init_weights(
    d_model: int = 512,
    n_heads: int = 8,
    seed: int = 0,
    init: str = "xavier",
    bias: bool = False,
) -> AttentionWeights:
    """Fresh weights for one layer.

    "xavier": exactly what torch.nn.MultiheadAttention(d_model, n_heads, bias=bias) draws
    under torch.manual_seed(seed) (Xavier-uniform Q|K|V, zero biases); "identity": Q = K = V = X
    split into heads and W^O = I, so attention scores are plain embedding similarity.
    Shapes: see AttentionWeights.
    """
    check_size(d_model, n_heads)
    if init == "identity":
        eye = torch.eye(d_model)  # [d, d]
        per_head = eye.reshape(d_model, n_heads, d_model // n_heads).permute(1, 0, 2).contiguous()
        return AttentionWeights(
            W_Q=per_head, W_K=per_head.clone(), W_V=per_head.clone(),
            W_O=eye.reshape(n_heads, d_model // n_heads, d_model).clone(),
        )  # fmt: skip
    if init != "xavier":
        raise MhaVizError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        mha = torch.nn.MultiheadAttention(d_model, n_heads, bias=bias)
    return from_torch_mha(mha)


def from_torch_mha(mha: torch.nn.MultiheadAttention) -> AttentionWeights:
    """Our per-head layout of a torch.nn.MultiheadAttention's weights (copied, not shared).

    Shapes: in_proj_weight [3d, d] (rows Q|K|V, out x in) -> W_Q/W_K/W_V [h, d, dh];
    out_proj.weight [d, d] (out x in) -> W_O [h, dh, d].
    """
    d, h = mha.embed_dim, mha.num_heads
    dh = d // h
    w = mha.in_proj_weight.detach()  # [3d, d]
    per_head = [w[i * d : (i + 1) * d].T.reshape(d, h, dh).permute(1, 0, 2).clone() for i in range(3)]
    biases: list[torch.Tensor | None] = [None, None, None]
    if mha.in_proj_bias is not None:
        b = mha.in_proj_bias.detach()  # [3d]
        biases = [b[i * d : (i + 1) * d].reshape(h, dh).clone() for i in range(3)]
    b_o = mha.out_proj.bias
    return AttentionWeights(
        W_Q=per_head[0], W_K=per_head[1], W_V=per_head[2],
        W_O=mha.out_proj.weight.detach().T.reshape(h, dh, d).clone(),
        b_Q=biases[0], b_K=biases[1], b_V=biases[2],
        b_O=None if b_o is None else b_o.detach().clone(),
    )  # fmt: skip


def sinusoidal_positions(n: int, d_model: int) -> torch.Tensor:
    """The fixed position encoding of "Attention Is All You Need". Shapes: returns [n, d_model]."""
    pos = torch.arange(n, dtype=torch.float64).unsqueeze(1)  # [n, 1]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n, d_model, dtype=torch.float64)  # [n, d]
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return pe.float()


def random_embeddings(token_ids: list[int], d_model: int, seed: int = 0, positions: bool = False) -> torch.Tensor:
    """Seeded random token embeddings: the same id always gets the same N(0, 1) vector.

    Shapes: returns [len(token_ids), d_model] float32.
    """
    rows = []
    for tid in token_ids:
        gen = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(tid)) % (2**63))
        rows.append(torch.randn(d_model, generator=gen))  # [d]
    x = torch.stack(rows) if rows else torch.zeros(0, d_model)  # [n, d]
    return x + sinusoidal_positions(len(token_ids), d_model) if positions else x


def save_weights(weights: AttentionWeights) -> bytes:
    """Serialise weights to safetensors bytes (float32, contiguous, CPU)."""
    tensors = {n: t.detach().to("cpu", torch.float32).contiguous() for n, t in weights.tensors().items()}
    meta = {"format": FORMAT_TAG}
    if weights.scale is not None:
        meta["scale"] = repr(float(weights.scale))
    return st_save(tensors, metadata=meta)


def _table(pairs: list[tuple[object, object]]) -> dict:
    """json object hook: refuse repeated names (a later entry would silently replace an earlier one)."""
    table = dict(pairs)
    if len(table) != len(pairs):
        raise MhaVizError("not a valid safetensors file (a name appears twice in the header)")
    return table


def _header_int(text: str) -> int:
    """json int hook: refuse numbers longer than any size or offset can be (Python would refuse 4300+ digits)."""
    if len(text.lstrip("-")) > 20:
        raise MhaVizError(f"not a valid safetensors file (a {len(text)}-digit number in its header)")
    return int(text)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_header(data: bytes) -> tuple[dict, dict]:
    """The validated tensor table and the metadata table of a safetensors file.

    Whatever the bytes are, this returns or raises MhaVizError: deep nesting, huge numbers, repeated
    names, wrong types, and overlapping, out-of-order or gapped data offsets are all refused.
    """
    if len(data) > MAX_FILE_BYTES:
        raise MhaVizError(f"weights file is {len(data) / 2**20:.1f} MB; the limit is {MAX_FILE_BYTES // 2**20} MB")
    if len(data) < 8:
        raise MhaVizError("not a safetensors file (too short); save weights from mha-viz as .safetensors")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER_BYTES or 8 + n > len(data):
        raise MhaVizError("not a valid safetensors file (header size is wrong or the file is truncated)")
    try:
        header = json.loads(data[8 : 8 + n].decode("utf-8"), object_pairs_hook=_table, parse_int=_header_int)
    except MhaVizError:
        raise
    except RecursionError:
        raise MhaVizError("not a valid safetensors file (its header is nested too deeply)") from None
    except (UnicodeDecodeError, ValueError, OverflowError):  # JSONDecodeError, or an integer too long to read
        raise MhaVizError("not a valid safetensors file (unreadable header); pickle files are not accepted") from None
    if not isinstance(header, dict):
        raise MhaVizError("not a valid safetensors file (header is not a table)")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise MhaVizError("not a valid safetensors file (its __metadata__ must map names to text values)")
    body = len(data) - 8 - n
    spans = []
    for name, info in header.items():
        if name not in _NAMES:
            raise MhaVizError(f"unexpected tensor {str(name)[:40]!r}; expected only {', '.join(_NAMES)}")
        if not isinstance(info, dict) or info.get("dtype") not in _ST_DTYPES:
            raise MhaVizError(f"tensor {name} must be a float tensor (F16, BF16, F32 or F64)")
        shape, offs = info.get("shape"), info.get("data_offsets")
        ok = isinstance(shape, list) and len(shape) <= 3 and all(_is_int(s) and 0 <= s <= MAX_D_MODEL for s in shape)
        ok = ok and isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) for o in offs)
        if not ok or not 0 <= offs[0] <= offs[1] <= body:
            raise MhaVizError(f"tensor {name} has an invalid shape or position in the file")
        if math.prod(shape) * _ST_DTYPES[info["dtype"]] != offs[1] - offs[0]:
            raise MhaVizError(f"tensor {name}: its shape does not match its stored size")
        spans.append((offs[0], offs[1], name))
    end = 0
    for start, stop, name in sorted(spans):  # the data must be laid out back to back, each byte used once
        if start != end:
            raise MhaVizError(f"tensor {name}'s data overlaps another tensor or leaves a gap (offset {start})")
        end = stop
    if end != body:
        raise MhaVizError("not a valid safetensors file (bytes after the last tensor, or the file is truncated)")
    missing = [n for n in ("W_Q", "W_K", "W_V", "W_O") if n not in header]
    if missing:
        raise MhaVizError(f"weights file lacks {', '.join(missing)}")
    return header, meta


def load_weights(data: bytes) -> AttentionWeights:
    """Parse and validate safetensors bytes into AttentionWeights (float32), or raise MhaVizError.

    Nothing else escapes: a crafted file gets a message saying what is wrong with it. Values must be
    finite and at most MAX_ABS_WEIGHT in size (larger ones overflow float32 attention scores), and a
    stored scale must lie in (0, MAX_SCALE].
    """
    try:
        return _load_weights(data)
    except MhaVizError:
        raise
    except Exception as exc:  # a case the checks above missed: still a message, never a traceback
        raise MhaVizError(f"could not read the weights file ({type(exc).__name__}: {exc})".splitlines()[0]) from None


def _load_weights(data: bytes) -> AttentionWeights:
    header, meta = _parse_header(data)
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        if len(header[name]["shape"]) != 3:
            raise MhaVizError(f"{name} must have 3 dimensions [n_heads, ..., ...]")
    h, d, dh = header["W_Q"]["shape"]
    check_size(d, h)
    if h * dh != d:
        raise MhaVizError(f"W_Q is [{h}, {d}, {dh}] but n_heads * d_head must equal d_model")
    scale = _scale(meta)
    try:
        raw = st_load(data)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # safetensors' own errors, or a Rust panic (a BaseException) on a malformed file
        raise MhaVizError(f"could not read the weights file: {exc}".splitlines()[0]) from None
    for name, t in raw.items():  # checked in the stored dtype, before float32 could turn 1e300 into inf
        if not bool(torch.isfinite(t).all()):
            raise MhaVizError(f"tensor {name} contains NaN or infinite values")
        largest = float(t.abs().max()) if t.numel() else 0.0
        if largest > MAX_ABS_WEIGHT:
            raise MhaVizError(
                f"tensor {name} has values up to {largest:.3g}; the limit is {MAX_ABS_WEIGHT:g} in size "
                "(larger weights overflow the attention scores); use smaller weights"
            )
    return AttentionWeights(**{n: t.to(torch.float32) for n, t in raw.items()}, scale=scale)


def _scale(meta: dict) -> float | None:
    """The file's score scale (metadata "scale"), None when absent; refused outside (0, MAX_SCALE]."""
    if "scale" not in meta:
        return None
    try:
        scale = float(meta["scale"])
    except (TypeError, ValueError, OverflowError):
        raise MhaVizError("the file's scale metadata is not a number") from None
    if not (math.isfinite(scale) and 0 < scale <= MAX_SCALE):
        raise MhaVizError(
            f"the file's scale metadata is {scale:g}; it must be a number above 0 and at most "
            f"{MAX_SCALE:g} (larger scales overflow the attention scores)"
        )
    return scale

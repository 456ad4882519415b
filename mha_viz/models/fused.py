"""A long attention call in one fused kernel where the model's attention is plain scaled-dot-product attention: the
output and each row's log-sum-exp from torch's flash attention (never a [h, n, n]), checked against the model's own
eager attention on TILE_CHECK_ROWS rows of the call, spread evenly, first and last included (on their keys only), on
one thread (runtime.threads.one_thread: dozens of small operations); a call nothing records checks its output only.
Pooled tile maps are not made here: tiles.pooled recomputes any from q, k and the log-sum-exp. A call that is anything
else (soft-capping, learned sinks, a position bias, dropout, a bool mask the model's eager function would be given as
is, a row that sees no key, an eager function mha-viz does not know) returns None: models/tiled.py's eager blocks run
it."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import torch

from mha_viz.config import TILE_FUSED_TOL
from mha_viz.models.masks import additive
from mha_viz.models.tiled import Tiled, check_rows_of, check_span
from mha_viz.runtime.threads import one_thread
from mha_viz.tiles import allowed_of, key_span, query_blocks

# the eager functions whose source is plain attention: softmax(q kᵀ · scaling + mask) v (Llama's is copied by most
# decoders); Gemma 2's is plain when its soft-cap is None
_PLAIN = ("llama", "bert", "gemma2")
_KNOWN: dict[Callable, bool] = {}


_SOURCES: dict[str, str] = {}


def _plain_source(name: str) -> str:
    """The source of transformers' ``name`` model's eager attention (its module imported once, only when asked)."""
    if name not in _SOURCES:
        mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        _SOURCES[name] = inspect.getsource(mod.eager_attention_forward)
    return _SOURCES[name]


def is_plain(eager: Callable) -> bool:
    """Whether the model's eager attention function is, character for character, one of the plain ones (_PLAIN),
    compared in order (a Llama copy matches the first: no other modeling module is imported)."""
    if eager not in _KNOWN:
        try:  # a function wrapping eager's (models/masks.converting) is read as eager's own source
            source = inspect.getsource(getattr(eager, "__wrapped__", eager))
            _KNOWN[eager] = any(source == _plain_source(name) for name in _PLAIN)
        except (OSError, TypeError, ImportError, AttributeError):
            _KNOWN[eager] = False
    return _KNOWN[eager]


def plain_scale(eager: Callable, module: torch.nn.Module, named: dict, kwargs: dict, d: int) -> float | None:
    """The call's scaling if it is plain scaled-dot-product attention (a known plain eager function, no soft-cap, no
    sink, no position bias, no head mask, no dropout while training), else None."""
    if not is_plain(eager) or (module.training and float(named.get("dropout") or 0.0) > 0.0):
        return None
    for name in ("softcap", "s_aux", "sinks", "position_bias", "head_mask"):
        if named.get(name) is not None or kwargs.get(name) is not None:
            return None
    scale = named.get("scaling")
    return float(d**-0.5 if scale is None else scale)


def _heads(t: torch.Tensor, h: int) -> torch.Tensor:
    """K/V heads repeated for their query heads (GQA), as the eager repeat_kv, where the kernel needs them: the CPU's
    flash kernel reads query head i's K/V from head i // (h / kv) itself (as the model's SDPA pass gives it them),
    no copy. Shapes: [b, kv, n, d] -> [b, h, n, d] on CUDA, as is on the CPU."""
    if t.shape[1] == h or t.device.type == "cpu":
        return t
    return t.repeat_interleave(h // t.shape[1], dim=1)


def is_causal(mask: torch.Tensor, n: int, n_k: int, rows: int = 256) -> bool:
    """Whether a mask is exactly causal (additive: 0 on and below the diagonal, masked above; bool: True on and below)
    for every text, read ``rows`` rows at a time (never a second [n, n]). Shapes: mask [b, 1, n, >= n_k]."""
    if n != n_k or mask.shape[1] != 1 or mask.shape[-2] != n:
        return False
    cols = torch.arange(n_k, device=mask.device)
    for r in range(0, n, rows):
        m = mask[..., r : r + rows, :n_k]
        low = cols <= torch.arange(r, r + m.shape[-2], device=mask.device).unsqueeze(-1)  # [rows, n_k]
        if not bool(allowed_of(m).eq(low).all()):
            return False
        if m.dtype != torch.bool and not bool((m.eq(0) == low).all()):
            return False
    return True


def causal_once(seen: dict, mask: torch.Tensor, n: int, n_k: int) -> bool:
    """is_causal, once per mask tensor (``seen``: id(mask) -> (mask, (n, n_k), answer))."""
    got = seen.get(id(mask))
    if got is None or got[0] is not mask or got[1] != (n, n_k):
        got = seen[id(mask)] = (mask, (n, n_k), is_causal(mask, n, n_k))
    return got[2]


_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _aligned(bias: torch.Tensor, align: int = 16) -> torch.Tensor:
    """A bias whose rows start on ``align`` elements, as the CUDA memory-efficient kernel requires (torch's own SDPA
    pads it the same way, aten preprocess_mask): a padded copy viewed back to its own keys where they do not.
    Shapes: [b, 1, r, c] -> the same."""
    c = int(bias.shape[-1])
    if bias.stride(-1) == 1 and all(s % align == 0 for s in bias.stride()[:-1]) and bias.data_ptr() % (4 * align) == 0:
        return bias
    return torch.nn.functional.pad(bias, (0, -c % align or align))[..., :c]


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool, scale: float):
    """Output [b, h, r, d] and log-sum-exp [b, h, r] (float32) of softmax(q kᵀ · scale + mask) v."""
    if q.device.type == "cuda":
        bias = None if mask is None else _aligned(mask.to(q.dtype)).expand(q.shape[0], q.shape[1], -1, -1)
        out, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, causal,
                                                                              scale=scale)  # fmt: skip
        return out, lse[..., : q.shape[-2]]
    return _FLASH(q, k, v, 0.0, causal, attn_mask=None if mask is None else mask.to(q.dtype), scale=scale)


def fused_call(
    eager: Callable, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    mask: torch.Tensor | None, args: tuple, kwargs: dict, named: dict, cells: int, keep: bool, check_rows: int,
    tile_f: int = 0, seen: dict | None = None,
) -> Tiled | None:  # fmt: skip
    """The call fused (output and log-sum-exp), or None where it is not plain or its check rows miss the eager ones
    by more than TILE_FUSED_TOL. ``keep``: the statistics and the self-check too. ``seen``: a pass's cache of
    is_causal by mask (every layer is given the same mask). ``tile_f``: unused (kept for callers; no tile is made).
    Shapes: query [b, h, n, d]; key, value [b, kv, n_k, d]; mask [b|1, 1, n|1, >= n_k] additive float, or bool where
    ``eager`` converts it (models/masks.converting), or None."""
    _, h, n, d = query.shape
    n_k = int(key.shape[-2])
    scale = plain_scale(eager, module, named, kwargs, d)
    if scale is None or (mask is not None and mask.shape[1] != 1):
        return None
    if mask is not None and mask.dtype == torch.bool and not getattr(eager, "converts_bool", False):
        return None  # eager would be given the bool mask as is
    with one_thread():  # many small operations: one thread (runtime.threads.one_thread)
        tril = mask is not None and causal_once({} if seen is None else seen, mask, n, n_k)
    mask = None if mask is None else mask[..., :n_k]
    per = query_blocks(n, h, n_k, cells)[0].stop
    blocks = [slice(r, min(n, r + per)) for r in range(0, n, per)]
    k_h, v_h = _heads(key, h), _heads(value, h)
    if mask is None or tril:  # one kernel call (causal: flash attention skips the keys after each row itself)
        out, lse = _flash(query, k_h, v_h, None, tril, scale)
    else:
        outs, lses = [], []
        for sl in blocks:
            mb = mask if mask.shape[-2] == 1 else mask[..., sl, :]
            allowed = allowed_of(mb)
            if not bool(allowed.any(-1).all()):  # a row that sees no key: the eager softmax's even spread
                return None
            lo, hi = key_span(allowed, n_k)
            add = additive(mb[..., lo:hi], query.dtype)
            o, s = _flash(query[:, :, sl], k_h[:, :, lo:hi], v_h[:, :, lo:hi], add, False, scale)
            outs.append(o)
            lses.append(s)
        out, lse = torch.cat(outs, 2), torch.cat(lses, 2)
    del k_h, v_h
    out = out.transpose(1, 2).contiguous()  # [b, n, h, d] as eager
    idx = check_rows_of(n, check_rows)  # the call's check rows, spread evenly (one eager call on their keys)
    lse = lse.double()  # [b, h, n]
    with one_thread():  # a few rows' many small operations (on a busy machine 5× faster than on every core)
        worst = check_span(eager, module, query, key, value, mask, args, kwargs, named, idx, out, lse, cells, keep)
    if worst[0] > TILE_FUSED_TOL or worst[0] != worst[0]:
        return None  # not the model's attention after all: its eager blocks run it
    if not keep:
        return Tiled(out=out, fused=True)
    return Tiled(out=out, lse=lse, delta=worst[1], fused=True)

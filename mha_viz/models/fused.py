"""A long attention call in one fused kernel where the model's attention is plain scaled-dot-product attention: the
output and each row's log-sum-exp from torch's flash attention (never a [h, n, n]), checked against the model's own
eager attention on TILE_CHECK_ROWS rows of every block; the f×f tile means of the weights rebuilt from q, k and the
log-sum-exp. A call that is anything else (soft-capping, learned sinks, a position bias, dropout, a bool mask, a row
that sees no key, an eager function mha-viz does not know) returns None: models/tiled.py's eager blocks run it."""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable

import numpy as np
import torch

from mha_viz.config import TILE_FUSED_TOL
from mha_viz.models.tiled import Tiled, check_rows_of, check_span
from mha_viz.tiles import allowed_of, key_span, query_blocks, tile_means

# the eager functions whose source is plain attention: softmax(q kᵀ · scaling + mask) v (Llama's is copied by most
# decoders); Gemma 2's is plain when its soft-cap is None
_PLAIN = ("llama", "bert", "gemma2")
_KNOWN: dict[Callable, bool] = {}


def _plain_sources() -> set[str]:
    out = set()
    for name in _PLAIN:
        mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        out.add(inspect.getsource(mod.eager_attention_forward))
    return out


def is_plain(eager: Callable) -> bool:
    """Whether the model's eager attention function is, character for character, one of the plain ones (_PLAIN)."""
    if eager not in _KNOWN:
        try:
            _KNOWN[eager] = inspect.getsource(eager) in _plain_sources()
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
    """K/V heads repeated for their query heads (GQA), as the eager repeat_kv. Shapes: [b, kv, n, d] -> [b, h, n, d]."""
    return t if t.shape[1] == h else t.repeat_interleave(h // t.shape[1], dim=1)


def is_causal(mask: torch.Tensor, n: int, n_k: int, rows: int = 256) -> bool:
    """Whether an additive mask is exactly causal (0 on and below the diagonal, masked above) for every text, read
    ``rows`` rows at a time (never a second [n, n]). Shapes: mask [b, 1, n, >= n_k] float."""
    if n != n_k or mask.shape[1] != 1 or mask.shape[-2] != n:
        return False
    cols = torch.arange(n_k, device=mask.device)
    for r in range(0, n, rows):
        m = mask[..., r : r + rows, :n_k]
        low = cols <= torch.arange(r, r + m.shape[-2], device=mask.device).unsqueeze(-1)  # [rows, n_k]
        if not (bool((m.eq(0) == low).all()) and bool(allowed_of(m).eq(low).all())):
            return False
    return True


def causal_once(seen: dict, mask: torch.Tensor, n: int, n_k: int) -> bool:
    """is_causal, once per mask tensor (``seen``: id(mask) -> (mask, (n, n_k), answer))."""
    got = seen.get(id(mask))
    if got is None or got[0] is not mask or got[1] != (n, n_k):
        got = seen[id(mask)] = (mask, (n, n_k), is_causal(mask, n, n_k))
    return got[2]


_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool, scale: float):
    """Output [b, h, r, d] and log-sum-exp [b, h, r] (float32) of softmax(q kᵀ · scale + mask) v."""
    if q.device.type == "cuda":
        out, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, None if mask is None else mask.expand(q.shape[0], q.shape[1], -1, -1).to(q.dtype), True, 0.0,
            causal, scale=scale)  # fmt: skip
        return out, lse[..., : q.shape[-2]]
    return _FLASH(q, k, v, 0.0, causal, attn_mask=None if mask is None else mask.to(q.dtype), scale=scale)


def fused_call(
    eager: Callable, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    mask: torch.Tensor | None, args: tuple, kwargs: dict, named: dict, cells: int, keep: bool, check_rows: int,
    tile_f: int, seen: dict | None = None,
) -> Tiled | None:  # fmt: skip
    """The call fused (output and log-sum-exp), or None where it is not plain or its check rows miss the eager ones
    by more than TILE_FUSED_TOL. ``keep``: the statistics, the self-check and (``tile_f``) the tile means too.
    ``seen``: a pass's cache of is_causal by mask (every layer is given the same mask).
    Shapes: query [b, h, n, d]; key, value [b, kv, n_k, d]; mask [b|1, 1, n|1, >= n_k] additive float or None."""
    _, h, n, d = query.shape
    n_k = int(key.shape[-2])
    scale = plain_scale(eager, module, named, kwargs, d)
    if scale is None or (mask is not None and (mask.dtype == torch.bool or mask.shape[1] != 1)):
        return None
    tril = mask is not None and causal_once({} if seen is None else seen, mask, n, n_k)
    mask = None if mask is None else mask[..., :n_k]
    rows_f = tile_f or 1
    per = max(rows_f, query_blocks(n, h, n_k, cells)[0].stop // rows_f * rows_f)
    blocks = [slice(r, min(n, r + per)) for r in range(0, n, per)]
    k_h, v_h = _heads(key, h), _heads(value, h)
    if mask is None or tril:  # one kernel call (causal: flash attention skips the keys after each row itself)
        out, lse = _flash(query, k_h, v_h, None, tril, scale)
        spans = [(0, n_k if mask is None else min(n_k, -(-sl.stop // rows_f) * rows_f)) for sl in blocks]
    else:
        outs, lses, spans = [], [], []
        for sl in blocks:
            mb = mask if mask.shape[-2] == 1 else mask[..., sl, :]
            allowed = allowed_of(mb)
            if not bool(allowed.any(-1).all()):  # a row that sees no key: the eager softmax's even spread
                return None
            lo, hi = key_span(allowed, n_k)
            if tile_f:
                lo, hi = lo // tile_f * tile_f, min(n_k, -(-hi // tile_f) * tile_f)
            o, s = _flash(query[:, :, sl], k_h[:, :, lo:hi], v_h[:, :, lo:hi], mb[..., lo:hi], False, scale)
            outs.append(o)
            lses.append(s)
            spans.append((lo, hi))
        out, lse = torch.cat(outs, 2), torch.cat(lses, 2)
    out = out.transpose(1, 2).contiguous()  # [b, n, h, d] as eager
    idx = torch.cat([sl.start + check_rows_of(sl.stop - sl.start, check_rows) for sl in blocks])
    lse = lse.double()  # [b, h, n]
    worst = check_span(eager, module, query, key, value, mask, args, kwargs, named, idx, out, lse, cells)
    if worst[0] > TILE_FUSED_TOL or worst[0] != worst[0]:
        return None  # not the model's attention after all: its eager blocks run it
    if not keep:
        return Tiled(out=out, fused=True)
    tiles = _tiles(query, key, lse, mask, tril, blocks, spans, scale, tile_f, cells // 4) if tile_f else None
    return Tiled(out=out, lse=lse, delta=worst[1], tiles=tiles, tile_f=tile_f if tiles is not None else 0,
                 fused=True)  # fmt: skip


def _tiles(
    q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, mask: torch.Tensor | None, causal: bool, blocks: list,
    spans: list, scale: float, f: int, cells: int,
) -> np.ndarray:  # fmt: skip
    """Batch item 0's f×f tile means of exp(q kᵀ · scale + mask − lse), in float32, a few whole tiles of rows at a
    time (at most ``cells`` scores: they stay in the cache), in one matmul per K head: [q · scale, −lse] · [k, 1]ᵀ
    (the K heads never repeated; a causal chunk reads the keys up to its last row only).
    Shapes: q [b, h, n, d], k [b, kv, n_k, d], lse [b, h, n]; returns [h, ceil(n/f), ceil(n_k/f)] float32."""
    _, h, n, d = q.shape
    kv, n_k = k.shape[1], k.shape[-2]
    g = h // kv
    q1 = torch.cat([q[0].float() * scale, -lse[0].float().unsqueeze(-1)], -1)  # [h, n, d + 1]
    k1 = torch.cat([k[0].float(), torch.ones(kv, n_k, 1, device=k.device)], -1)  # [kv, n_k, d + 1]
    out = torch.zeros(h, -(-n // f), -(-n_k // f))
    rows = max(f, cells // max(1, h * n_k) // f * f)
    tri = torch.ones(rows, rows + f, dtype=torch.bool, device=k.device).triu(1) if causal else None  # key after row
    for sl, (lo, hi) in zip(blocks, spans, strict=True):
        for r0 in range(sl.start, sl.stop, rows):
            r1 = min(sl.stop, r0 + rows)
            top = min(hi, -(-r1 // f) * f) if causal else hi
            r, c = r1 - r0, top - lo
            s = torch.bmm(q1[:, r0:r1].reshape(kv, g * r, d + 1), k1[:, lo:top].transpose(1, 2)).view(h, r, c)
            if causal:  # keys after the row (only in the chunk's diagonal part): weight 0
                s[..., r0 - lo :].masked_fill_(tri[:r, : top - r0], -math.inf)
            elif mask is not None:
                s.add_((mask[0, 0] if mask.shape[-2] == 1 else mask[0, 0, r0:r1])[..., lo:top].float())
            out[:, r0 // f : -(-r1 // f), lo // f : -(-top // f)] = tile_means(s.exp_(), f, n_k - lo).cpu()
    return out.numpy()

"""A long attention call, a block of query rows at a time: the model's own eager attention called on each block (so
the output is the model's, row for row), never a whole [b, h, n, n]. On the way, each row's softmax statistics
(tiles.row_stats), the self-check of the block's check rows (our recomputation and the statistics' weights against
the model's weights). No pooled tile map is made here: tiles.pooled recomputes any from q, k and the statistics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from mha_viz.attention import attention_pattern
from mha_viz.models.self_check import applied_weights
from mha_viz.tiles import allowed_of, key_span, query_blocks, row_stats, window_weights


@dataclass(eq=False)
class Tiled:
    """What a tiled call gives back. Shapes: out [b, q_pos, h, d_head] (as eager); m, lse [b, h, q_pos] float64 (None
    when nothing is recorded)."""

    out: torch.Tensor
    m: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    delta: float = 0.0
    fused: bool = False  # computed by models/fused.py (one flash-attention kernel), not in eager blocks


def _rows(t: torch.Tensor | None, sl: slice) -> torch.Tensor | None:
    return None if t is None or t.shape[-2] == 1 else t[..., sl, :]


def tiled_eager(
    eager: Callable, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    mask: torch.Tensor | None, args: tuple, kwargs: dict, cells: int, named: dict | None = None,
    check_rows: int = 0,
) -> Tiled:  # fmt: skip
    """The model's eager attention in blocks of at most ``cells`` scores. ``named`` (the eager call's arguments by
    name: scaling, softcap, s_aux) asks for the record: statistics, self-check (``check_rows`` rows a block, evenly
    spread, first and last included; 0: every row).
    Shapes: query [b, h, q_pos, d]; key, value [b, kv, k_pos, d]; mask [b|1, 1|h, q_pos|1, >= k_pos] or None."""
    _, h, n, d = query.shape
    n_k = int(key.shape[-2])
    mask = None if mask is None else mask[..., :n_k]
    per = query_blocks(n, h, n_k, cells)[0].stop
    outs, ms, lses, worst = [], [], [], 0.0
    for r in range(0, n, per):
        sl = slice(r, min(n, r + per))
        mb = mask if mask is None or mask.shape[-2] == 1 else mask[..., sl, :]
        allowed = allowed_of(mb)
        lo, hi = key_span(allowed, n_k)
        extra = {
            name: (t[..., sl, lo:hi] if t.shape[-2] == n else t[..., lo:hi]) if _pairwise(t, n, n_k) else t
            for name, t in kwargs.items()
        }  # fmt: skip (a position bias [b, h, q, k])
        q_b, k_b = query[:, :, sl], key[:, :, lo:hi]
        m_b = None if mb is None else mb[..., lo:hi]
        out, w = eager(module, q_b, k_b, value[:, :, lo:hi], m_b, *args, **extra)  # [b, r, h, d], [b, h, r, hi-lo]
        outs.append(out)
        if named is None:
            continue
        scale, softcap, sink = _numbers(named, d)
        add = _add(m_b, extra.get("position_bias"))
        m, lse = row_stats(w.detach(), q_b, k_b, scale, softcap, add, sink)
        ms.append(m)
        lses.append(lse)
        pos = kwargs.get("position_bias")
        pos = _rows(pos, sl) if isinstance(pos, torch.Tensor) else None
        worst = max(worst, _check(query[:, :, sl], key, (w.detach(), lo), mb, pos, lse, named, d, check_rows))
    return Tiled(
        out=torch.cat(outs, dim=1),
        m=torch.cat(ms, -1) if ms else None,
        lse=torch.cat(lses, -1) if lses else None,
        delta=worst,
    )


def _pairwise(t: object, n: int, n_k: int) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[-1] == n_k and t.shape[-2] in (1, n)


def _numbers(named: dict, d: int) -> tuple[float, float | None, torch.Tensor | None]:
    scale = named.get("scaling")
    softcap = named.get("softcap")
    sink = named.get("s_aux")
    return (
        float(d**-0.5 if scale is None else scale),
        None if softcap is None else float(softcap),
        sink.detach().float() if isinstance(sink, torch.Tensor) else None,
    )


def _add(mask: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor | None:
    """What eager adds to the scores: the additive mask (not a bool one) and a position bias."""
    add = None if mask is None or mask.dtype == torch.bool else mask.float()
    if isinstance(bias, torch.Tensor):
        add = bias.float() if add is None else add + bias.float()
    return add


def _check(
    q: torch.Tensor, k: torch.Tensor, span: tuple[torch.Tensor, int], mask: torch.Tensor | None,
    pos: torch.Tensor | None, lse: torch.Tensor, named: dict, d: int, check_rows: int,
) -> float:  # fmt: skip
    """max |ours − theirs| on the block's check rows, for our recomputation (attention.attention_pattern, from q, k,
    the mask and scaling as a Call records them) and for the statistics' weights (tiles.window_weights)."""
    r = q.shape[-2]
    w, lo = span  # the model's weights [b, h, r, c] of keys lo … lo + c − 1
    idx = check_rows_of(r, check_rows)
    scale, softcap, sink = _numbers(named, d)
    if mask is not None and mask.shape[-2] > 1:
        mask = mask[..., idx, :]  # the check rows only
    allowed = None if mask is None else allowed_of(mask)
    bias = None if pos is None else (pos.float() if pos.shape[-2] == 1 else pos.float()[..., idx, :])
    if mask is not None and mask.dtype != torch.bool:  # the finite part of an additive mask is a bias
        fin = torch.where(allowed, mask, torch.zeros((), dtype=mask.dtype)).float()
        bias = fin if bias is None else fin + bias
    _, ours, _ = attention_pattern(q[:, :, idx].float(), k.float(), scale=scale, softcap=softcap, bias=bias,
                                   allowed=allowed, sink=sink)  # fmt: skip
    theirs = torch.zeros(*w.shape[:2], len(idx), k.shape[-2], dtype=torch.float32, device=ours.device)
    theirs[..., lo : lo + w.shape[-1]] = w[:, :, idx].float()
    want = applied_weights(theirs, ours, sink is not None)
    stats = window_weights(q[:, :, idx], k, lse[..., idx], scale, softcap, bias, allowed, sink is not None, k.shape[-2])
    delta = max(float((ours - want).abs().max()), float((stats - want).abs().max()))
    return delta if delta == delta else float("nan")


def check_rows_of(r: int, check_rows: int) -> torch.Tensor:
    """A block's check rows: ``check_rows`` of its ``r`` rows spread evenly, first and last included (0: all)."""
    return torch.arange(r) if not check_rows or check_rows >= r else torch.linspace(0, r - 1, check_rows).round().long()


def check_span(
    eager: Callable, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    mask: torch.Tensor | None, args: tuple, kwargs: dict, named: dict, idx: torch.Tensor, out: torch.Tensor,
    lse: torch.Tensor, cells: int, weights: bool = True,
) -> tuple[float, float]:  # fmt: skip
    """A call computed elsewhere (models/fused.py) checked on rows ``idx``: the model's own eager attention on those
    rows alone (a few rows at a time, at most cells / 4 scores, on the keys those rows may see: tiles.key_span; the
    others' weights are exactly 0), its output against ``out`` and its weights against our recomputation and the
    statistics' (_check; not with ``weights`` False: a call nothing records, only its output checked). Returns
    (max |output difference|, the self-check's delta: 0.0 without ``weights``).
    Shapes: query [b, h, n, d]; key, value [b, kv, n_k, d]; mask [b|1, 1, n|1, n_k] or None; out [b, n, h, d];
    lse [b, h, n]."""
    _, h, n, d = query.shape
    n_k = int(key.shape[-2])
    out_worst, worst = 0.0, 0.0
    for sl in query_blocks(len(idx), h, n_k, max(1, cells // 4)):
        rows = idx[sl]
        mb = mask if mask is None or mask.shape[-2] == 1 else mask[..., rows, :]
        lo, hi = key_span(allowed_of(mb), n_k)
        mb = None if mb is None else mb[..., lo:hi]
        extra = {name: (t[..., rows, lo:hi] if t.shape[-2] == n else t[..., lo:hi]) if _pairwise(t, n, n_k) else t
                 for name, t in kwargs.items()}  # fmt: skip
        k_b, v_b = key[:, :, lo:hi], value[:, :, lo:hi]
        o, w = eager(module, query[:, :, rows], k_b, v_b, mb, *args, **extra)  # [b, r, h, d], [b, h, r, hi - lo]
        out_worst = _worse(out_worst, float((o.detach() - out[:, rows]).abs().max()))
        if weights:
            theirs = (w.detach(), 0)
            worst = _worse(worst, _check(query[:, :, rows], k_b, theirs, mb, None, lse[..., rows], named, d, 0))
    return out_worst, worst


def _worse(a: float, b: float) -> float:
    """The larger of two differences, NaN if either is."""
    return b if b != b or b > a else a

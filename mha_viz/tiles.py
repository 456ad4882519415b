"""Exact attention a block of query rows at a time, and what makes any part of a long pattern exact on demand.

A long text's attention is never held as a whole [heads, n, n]: the model's own eager attention is called on a
block of query rows (models/tiled.py), and each row's softmax statistics are kept: the row max m (the highest score)
and the log-sum-exp lse (the sink's logit included where a model has learned sinks). A weight is then
w_ij = exp(s_ij − lse_i): any window of exact weights, or any pooled tile map (the mean of the real weights in a
tile), is recomputed from q, k and the statistics alone, without the rest of its rows (window_weights, pooled).

Torch only, no model. Shapes use transformers' layout: q [b, h, q_pos, d_head], k [b, kv, k_pos, d_head]; a mask
block is additive float (the model's) or bool (True = allowed), [b|1, h|1, rows|1, k_pos].
"""

from __future__ import annotations

import math

import torch

from mha_viz.tile_pool import key_span_bytes, mask_rows, pooled_maps


def query_blocks(n_q: int, n_heads: int, n_k: int, cells: int) -> list[slice]:
    """Blocks of query rows with at most ``cells`` scores each (h × rows × keys; at least one row)."""
    rows = max(1, cells // max(1, n_heads * n_k))
    return [slice(r, min(n_q, r + rows)) for r in range(0, n_q, rows)]


def allowed_of(mask: torch.Tensor | None) -> torch.Tensor | None:
    """A mask block as bool (True = allowed): an additive mask's entries at its dtype's minimum are masked."""
    if mask is None or mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2


def key_span(allowed: torch.Tensor | None, n_k: int) -> tuple[int, int]:
    """The keys [lo, hi) that any row of a mask block may see (a causal block sees none after its last row, a sliding
    window none before its first row's window): the weights outside are exactly 0, so the block is computed on these
    keys alone. A block with a row that sees no key at all keeps every key (its eager softmax spreads that row over
    all of them). Shapes: allowed [b|1, h|1, rows|1, n_k] bool or None."""
    lo, hi, _ = key_span_bytes(None if allowed is None else allowed.view(torch.uint8), n_k)  # bytes: ~20× faster
    return lo, hi


def _heads(k: torch.Tensor, h: int) -> torch.Tensor:
    """K/V heads repeated for their query heads (GQA). Shapes: [b, kv, n, d] -> [b, h, n, d]."""
    return k if k.shape[1] == h else k.repeat_interleave(h // k.shape[1], dim=1)


def scores(
    q: torch.Tensor, k: torch.Tensor, scale: float, softcap: float | None, add: torch.Tensor | None
) -> torch.Tensor:
    """The scores as the model's eager attention computes them: q kᵀ · scale → soft-cap → + the additive mask and
    position bias ``add`` (masked entries stay very negative or −inf). Shapes: q [b, h, r, d], k [b, kv, n, d], add
    broadcast to [b, h, r, n]; returns [b, h, r, n]."""
    s = torch.matmul(q, _heads(k, q.shape[1]).transpose(-1, -2)).mul_(scale)
    if softcap is not None:
        s.div_(softcap).tanh_().mul_(softcap)
    return s if add is None else s.add_(add.to(s.dtype))


def row_stats(
    weights: torch.Tensor, q: torch.Tensor, k: torch.Tensor, scale: float, softcap: float | None,
    add: torch.Tensor | None, sink: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Each row's (max score, log-sum-exp) from the weights the model computed for it: at the row's heaviest key j,
    w_ij = exp(s_ij − lse_i), so lse_i = s_ij − log w_ij and m_i = s_ij (the heaviest weight is the highest score).
    Only one score per row is computed. A row whose heaviest weight underflows (a learned sink took it all) gets its
    log-sum-exp from its whole row of scores. Shapes: weights [b, h, r, n] (keys k's), q [b, h, r, d], k [b, kv, n,
    d], add broadcast to [b, h, r, n], sink [h]; returns m, lse [b, h, r] in float64."""
    b, h, r, _ = weights.shape
    w, j = weights.max(-1)  # [b, h, r]
    k_h = _heads(k, h)
    kj = torch.gather(k_h, 2, j.unsqueeze(-1).expand(b, h, r, k.shape[-1]))  # [b, h, r, d]: each row's heaviest key
    s = (q.double() * kj.double()).sum(-1) * scale  # [b, h, r]
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if add is not None:
        s = s + torch.gather(add.expand(b, h, r, add.shape[-1]), 3, j.unsqueeze(-1)).squeeze(-1).double()
    lse = s - torch.log(w.double())
    tiny = w < torch.finfo(weights.dtype).tiny * 2**30
    if bool(tiny.any()):  # rare: recomputed from the whole rows
        full = scores(q.double(), k.double(), scale, softcap, None if add is None else add.double())
        if sink is not None:
            full = torch.cat([full, sink.double().reshape(1, -1, 1, 1).expand(b, h, r, 1)], -1)
        lse = torch.where(tiny, torch.logsumexp(full, -1), lse)
    return s, lse


def window_weights(
    q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, scale: float, softcap: float | None,
    add: torch.Tensor | None, allowed: torch.Tensor | None, sink: bool = False, n_k: int | None = None,
    dead: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Exact weights of a window (some query rows × some keys) from the rows' statistics: exp(s − lse). A row that may
    see no key at all gets what the model's eager softmax gives it: 1 / n_k on every key (0 with a learned sink).
    ``dead``: the rows that see no key of their whole row; None: the rows that see none of the window's keys, right
    only when the window holds every key its rows may see (a window a row sees none of holds 0s for that row).
    Shapes: q [b, h, r, d] (the window's rows), k [b, kv, c, d] (its keys), lse [b, h, r], add and allowed broadcast to
    [b, h, r, c] (allowed: the window's part of the mask), n_k the layer's whole key count, dead [b|1, h|1, r];
    returns [b, h, r, c]."""
    s = scores(q.double(), k.double(), scale, softcap, None if add is None else add.double())
    if allowed is not None:
        s.masked_fill_(~allowed, -math.inf)
    w = torch.exp(s - lse.double().unsqueeze(-1))
    if allowed is None:
        return w.float()
    dead = dead_rows(allowed) if dead is None else dead
    return torch.where(dead.unsqueeze(-1), 0.0 if sink else 1.0 / (n_k or s.shape[-1]), w).float()


def dead_rows(allowed: torch.Tensor) -> torch.Tensor:
    """Rows of a mask that may see no key (in the window given). Shapes: [b, h|1, r, c] -> [b, h|1, r]."""
    return ~allowed.any(-1)


def item_rows(t: torch.Tensor | None, rows: slice | torch.Tensor, keys: slice = slice(None)) -> torch.Tensor | None:
    """Batch item 0's ``rows`` (a slice or an index) × ``keys`` of a mask or bias [b|1, h|1, q|1, k]
    (tile_pool.mask_rows: one row shared by every query stays as it is). Shapes: returns [1, h|1, r|1, c]."""
    return None if t is None else mask_rows(t, rows)[:1][..., keys]


def whole_row_dead(allowed: torch.Tensor | None, rows: slice | torch.Tensor) -> torch.Tensor | None:
    """window_weights' ``dead`` for a window of some keys: the rows that see no key of their whole row (a row that sees
    none of the window's keys but others has 0 there, not the eager softmax's 1 / n_k). Shapes: allowed [b|1, h|1,
    q|1, k]; returns [1, h|1, r|1]."""
    return None if allowed is None else dead_rows(item_rows(allowed, rows))


def pooled(
    q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, f: int, scale: float, softcap: float | None,
    add: torch.Tensor | None, allowed: torch.Tensor | None, sink: bool = False, cells: int = 2**22,
) -> torch.Tensor:  # fmt: skip
    """Batch item 0's weights exp(s − lse) averaged over f×f tiles (the last tile on each side may be partial: it
    averages the cells it has), computed on demand from q, k and the rows' log-sum-exp, a block of at most ``cells``
    scores at a time on the keys its rows may see (tile_pool.pooled_maps: several tile sides in one pass). A row that
    may see no key gets the eager softmax's 1 / n_k on every key (0 with a learned sink).
    Shapes: q [b, h, n, d], k [b, kv, n_k, d], lse [b, h, n], add and allowed [b|1, h|1, n|1, n_k] or None; returns
    [h, ceil(n/f), ceil(n_k/f)] float32."""
    return pooled_maps(q, k, lse, (f,), scale, softcap, add, allowed, sink, cells)[0]


def row_lse(
    q: torch.Tensor, k: torch.Tensor, scale: float, softcap: float | None, add: torch.Tensor | None,
    allowed: torch.Tensor | None, sink: torch.Tensor | None = None, cells: int = 2**23,
) -> torch.Tensor:  # fmt: skip
    """Each row's log-sum-exp computed from its whole row of scores, a block of rows at a time (a call recorded
    without tiles). Rows that see no key get 0 (window_weights gives them the eager softmax's even spread).
    Shapes: q [b, h, n, d], k [b, kv, n_k, d], add and allowed [b|1, h|1, n|1, n_k]; sink [h]; returns [b, h, n]."""
    b, h, n, _ = q.shape
    out = []
    for sl in query_blocks(n, h, k.shape[-2], cells):
        s = scores(
            q[:, :, sl].double(), k.double(), scale, softcap, None if (a := mask_rows(add, sl)) is None else a.double()
        )
        if allowed is not None:
            s.masked_fill_(~mask_rows(allowed, sl), -math.inf)
        if sink is not None:
            s = torch.cat([s, sink.double().reshape(1, -1, 1, 1).expand(b, h, s.shape[-2], 1)], -1)
        lse = torch.logsumexp(s, -1)
        out.append(torch.where(torch.isfinite(lse), lse, torch.zeros((), dtype=lse.dtype)))
    return torch.cat(out, -1)

"""Pooled exact maps of a long attention call: the mean of the real weights exp(s − lse) in each f×f tile, for one or
several tile sides f in one pass over the scores (issue 38 §3: the Overview's and the Heads grid's maps of a layer).

The scores are computed a block of query rows × a chunk of keys at a time (at most ``cells`` of them: a block stays
in the CPU's cache through its matmul, mask, exp and sums), only on the keys the block's rows may see; the mask is
applied only to the chunk's columns that some row may not see (a causal block: the diagonal's), a chunk no row may
see is skipped (its weights are exactly 0), and the mask is read as bytes (a bool reduction is ~20× slower). The
weights are summed per row over each tile's keys, then over each tile's rows (tile_means' order), in float32 (float64
for float64 input). Torch only, no model. Shapes as mha_viz.tiles: q [b, h, n, d], k [b, kv, n_k, d], lse [b, h, n].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch


def mask_rows(t: torch.Tensor | None, sl: slice | torch.Tensor) -> torch.Tensor | None:
    """A block of a mask's rows; a one-row mask (a padding mask, or one query's row) holds for every row as it is."""
    return t if t is None or t.shape[-2] == 1 else t[..., sl, :]


def _over_rows(u: torch.Tensor, op: str) -> torch.Tensor:
    """A byte mask [..., h|1, r|1, c] reduced over every axis but the keys (``op`` amax: any row sees the key; amin:
    every row does). Shapes: returns [c] uint8."""
    return getattr(u, op)(dim=tuple(range(u.dim() - 1)))


def _mask_chunk(s: torch.Tensor, ok: torch.Tensor, u: torch.Tensor) -> None:
    """Masks the chunk's scores s [h, r, c] in place where ``ok`` [h|1, r|1, c] (bool; ``u`` the same as bytes) is
    False, only on the columns from the first to the last that some row may not see."""
    bad = (_over_rows(u, "amin") == 0).nonzero()  # columns that some row of some head may not see
    if len(bad):
        m0, m1 = int(bad[0]), int(bad[-1]) + 1
        s[..., m0:m1].masked_fill_(~ok[..., m0:m1], -math.inf)


def _add_col_sums(out: torch.Tensor, w: torch.Tensor, lo: int, f: int) -> None:
    """Adds each row's sums of the weights w [h, r, c] (keys lo … lo + c − 1) over each f-wide tile of keys into out
    [h, r, ceil(n_k/f)] (a tile cut by the chunk's edges gets its part)."""
    hi = lo + w.shape[-1]
    a = min(hi, -(-lo // f) * f)  # the first tile edge at or after lo
    b = max(a, hi // f * f)  # the last tile edge at or before hi
    if lo < a:
        out[..., lo // f] += w[..., : a - lo].sum(-1)
    if a < b:
        out[..., a // f : b // f] += w[..., a - lo : b - lo].unflatten(-1, (-1, f)).sum(-1)
    if b < hi:
        out[..., b // f] += w[..., b - lo :].sum(-1)


def key_span_bytes(u: torch.Tensor | None, n_k: int) -> tuple[int, int, bool]:
    """The keys [lo, hi) any row of a byte mask block [..., h|1, r|1, n_k] may see, and whether a row sees none (then
    every key: its eager softmax spreads it over all of them); tiles.key_span reads it."""
    if u is None:
        return 0, n_k, False
    if int(u.amax(-1).amin()) == 0:
        return 0, n_k, True
    cols = _over_rows(u, "amax").nonzero()
    return int(cols[0]), int(cols[-1]) + 1, False


def pooled_maps(
    q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, fs: Sequence[int], scale: float, softcap: float | None,
    add: torch.Tensor | None, allowed: torch.Tensor | None, sink: bool = False, cells: int = 2**22,
    chunk: int = 1024, between: Callable[[], None] | None = None,
) -> list[torch.Tensor]:  # fmt: skip
    """Batch item 0's weights exp(s − lse) averaged over f×f tiles for each f in ``fs`` (the last tile on each side may
    be partial: it averages the cells it has), from q, k and the rows' log-sum-exp, in q's precision (float32, or
    float64), one matmul per K head (never repeated; without soft-cap the log-sum-exp is folded in:
    [q · scale, −lse] · [k, 1]ᵀ), then exp: the old function's float32 math. A row that may see no key gets the
    eager softmax's 1 / n_k on every key (0 with a learned sink). ``between()`` is called before each block of rows
    (the maps computed ahead wait there while a page runs, or raise to stop: pipeline/pool_ahead.py).
    Shapes: q [b, h, n, d], k [b, kv, n_k, d], lse [b, h, n], add and allowed [b|1, h|1, n|1, n_k] or None; returns
    [h, ceil(n/f), ceil(n_k/f)] float32 for each f."""
    h, n = int(q.shape[1]), int(q.shape[-2])
    kv, n_k = int(k.shape[1]), int(k.shape[-2])
    g = h // kv
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    fold = softcap is None
    q1 = q[0].to(dt) * scale  # [h, n, d]
    k1 = k[0].to(dt)  # [kv, n_k, d]
    if fold:
        q1 = torch.cat([q1, -lse[0].to(dt).unsqueeze(-1)], -1)  # [h, n, d + 1]
        k1 = torch.cat([k1, torch.ones(kv, n_k, 1, dtype=dt, device=k.device)], -1)  # [kv, n_k, d + 1]
    k1 = k1.transpose(1, 2).contiguous()  # [kv, d(+1), n_k]
    sums = [torch.zeros(h, -(-n // f), -(-n_k // f), dtype=dt, device=q.device) for f in fs]  # [h, m_q, m_k]
    chunk = min(n_k, chunk)
    rows = max(1, cells // max(1, h * chunk))
    for r0 in range(0, n, rows):
        if between is not None:
            between()
        sl = slice(r0, min(n, r0 + rows))
        r = sl.stop - r0
        ok = None if allowed is None else mask_rows(allowed, sl)[0]  # [h|1, r|1, n_k] bool
        u = None if ok is None else ok.view(torch.uint8)
        lo, hi, dead = key_span_bytes(u, n_k)
        row_sums = [torch.zeros(h, r, -(-n_k // f), dtype=dt, device=q.device) for f in fs]  # [h, r, m_k]
        qb = q1[:, sl].reshape(kv, g * r, -1)  # [kv, g·r, d(+1)]
        for c0 in range(lo, hi, chunk):
            c1 = min(hi, c0 + chunk)
            if u is not None and not dead and int(u[..., c0:c1].amax()) == 0:
                continue  # no row sees these keys: their weights are exactly 0
            s = torch.bmm(qb, k1[:, :, c0:c1]).view(h, r, c1 - c0)
            if not fold:
                s.div_(softcap).tanh_().mul_(softcap).sub_(lse[0, :, sl].to(dt).unsqueeze(-1))
            if add is not None:
                s.add_(mask_rows(add, sl)[0][..., c0:c1].to(dt))
            if ok is not None:
                _mask_chunk(s, ok[..., c0:c1], u[..., c0:c1])
            w = s.exp_()
            if dead:  # key_span kept every key: the eager softmax's rows
                w = torch.where((u.amax(-1) == 0).unsqueeze(-1), 0.0 if sink else 1.0 / n_k, w)
            for f, rs in zip(fs, row_sums, strict=True):
                _add_col_sums(rs, w, c0, f)
        for f, rs, out in zip(fs, row_sums, sums, strict=True):
            out.index_add_(1, torch.arange(r0, sl.stop, device=q.device) // f, rs)
    maps = []
    for f, out in zip(fs, sums, strict=True):
        per_row = torch.clamp(n - torch.arange(0, n, f), max=f).to(dt)
        per_col = torch.clamp(n_k - torch.arange(0, n_k, f), max=f).to(dt)
        maps.append((out.cpu() / torch.outer(per_row, per_col)).float())
    return maps

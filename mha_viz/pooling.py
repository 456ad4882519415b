"""Block means: a long pattern averaged over f×f blocks of cells (the Overview's tiles, the grid's panels).

Pure numpy, no model: used by mha_viz.pipeline.rows and, during a long text's recorded pass, by models.capture (the
tiles of each layer's checked pattern, so the Overview needs no second look at every layer)."""

from __future__ import annotations

import math

import numpy as np


def block_means(stack: np.ndarray, f: int) -> np.ndarray:
    """The last two axes averaged over f×f blocks (the last block on each side may be partial: it averages the
    cells it has), as figures.common.pool_blocks. Shapes: [..., n_q, n_k] -> [..., ceil(n_q/f), ceil(n_k/f)]."""
    a = np.asarray(stack)
    nq, nk = a.shape[-2:]
    mq, mk = math.ceil(nq / f), math.ceil(nk / f)
    if (mq * f, mk * f) != (nq, nk):  # zeros to whole blocks (in the input's dtype: no float64 copy of it)
        a = np.pad(a, [(0, 0)] * (a.ndim - 2) + [(0, mq * f - nq), (0, mk * f - nk)])
    sums = a.reshape(*a.shape[:-2], mq, f, mk, f).sum((-1, -3), dtype=np.float64)
    counts = np.outer(_block_sizes(nq, f), _block_sizes(nk, f))  # [mq, mk]: cells in each block
    return (sums / counts).astype(np.float32)


def _block_sizes(n: int, f: int) -> np.ndarray:
    """Cells along one side of each f-block (the last one may be partial). Shapes: -> [ceil(n / f)]."""
    return np.minimum(f, n - np.arange(0, n, f)).astype(np.float64)


def pool_factor(n_q: int, n_k: int, max_cells: int) -> int:
    """The block side that leaves at most ``max_cells`` cells per side (as figures.common.pool_blocks)."""
    return max(1, math.ceil(max(n_q, n_k) / max_cells))

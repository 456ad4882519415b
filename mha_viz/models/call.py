"""One attention call as the model made it: what the recorder (capture.py) files for each call and every later step
reads (the self-check, the road, the long-text rows, the architecture probes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mha_viz.config import POOLED_KEEP_BYTES, POOLED_KEEP_SIDES
from mha_viz.tiles import allowed_of, pooled_maps, row_lse


@dataclass(eq=False)
class Call:
    """One attention call as the model made it (all batch items), detached, float32, on the CPU.

    Shapes: q [b, n_heads, q_pos, d_head]; k, v [b, n_kv_heads, k_pos, d_head]; bias [b|1, n_heads|1,
    q_pos, k_pos] additive (position bias and any non-masking part of the mask) or None; allowed
    [b, n_heads|1, q_pos, k_pos] bool or None; x [b, q_pos, d_model] (the attention module's input),
    x_kv the same for the key side of cross-attention; wo_in [b, q_pos, n_heads * d_head] (heads
    concatenated, as they enter W^O); wo_out [b, q_pos, d_model] (W^O's output as the model computed it).
    """

    module_id: int  # id() of the attention module that made the call
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scaling: float
    softcap: float | None
    bias: torch.Tensor | None
    allowed: torch.Tensor | None
    delta: float  # max |our pattern - the model's own weights| over every row
    part: str = "?"
    layer: int = -1
    wo_in: torch.Tensor | None = None
    x: torch.Tensor | None = None
    x_kv: torch.Tensor | None = None
    wo_out: torch.Tensor | None = None
    q_pre: torch.Tensor | None = None  # [b, q_pos, h*dh]: the query projection before rotary embeddings
    wo_read: torch.Tensor | None = None  # [b, q_pos, h*dh]: what W^O read, where the model transforms concat first
    sink: torch.Tensor | None = None  # [h]: learned sink logits in each row's softmax denominator (gpt-oss)
    k_pre: torch.Tensor | None = None  # [b, k_pos, kv*dh]: the key projection before rotary embeddings
    tiles: np.ndarray | None = None  # [n_heads, ceil(q_pos/f), ceil(k_pos/f)]: batch item 0's pattern, f×f block means
    tile_f: int = 0  # the block side f of ``tiles``
    c_kv: torch.Tensor | None = None  # [b, k_pos, d_c]: latent attention's compressed key/value latent (after its norm)
    k_rope_pre: torch.Tensor | None = None  # [b, k_pos, d_rope]: latent attention's rotary key part before rotation
    v2: torch.Tensor | None = None  # [b, n_kv_heads, k_pos, d_head]: the values of a second call with the same q and
    # k (differential attention: DiffLlama calls its attention on each half of V)
    experts: torch.Tensor | None = None  # [b·q_pos, k] long: a mixture of attention heads' chosen experts (moa.py)
    gates: torch.Tensor | None = None  # [b·q_pos, k]: their gates
    # a tiled call (models/tiled.py): each row's highest score and log-sum-exp, [b, n_heads, q_pos] float64; a weight is
    # exp(score − row_lse) (tiles.window_weights): any window or tile map is exact on demand
    row_max: torch.Tensor | None = None  # None for a fused call (models/fused.py: the kernel gives the lse alone)
    row_lse: torch.Tensor | None = None
    fused: bool = False  # computed in one fused flash-attention kernel (models/fused.py), checked against eager
    # every head's pooled exact maps computed so far, by tile side f (pooled_maps: a view's, or ui/pool_ahead.py's
    # in the background after a long recording): [n_heads, ceil(q_pos/f), ceil(k_pos/f)] float32, each at most
    # POOLED_KEEP_BYTES, the last POOLED_KEEP_SIDES sides
    pooled: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def pooled_map(self, f: int, heads: slice = slice(None)) -> np.ndarray:
        """Batch item 0's weights of the heads ``heads`` as f×f tile means (the Overview's and Heads grid's pooled
        exact maps): kept ones (``pooled``), else computed (pooled_maps). Shapes: [h', ceil(q_pos/f), ceil(k_pos/f)]
        float32."""
        kept = self.pooled.get(f)
        if kept is not None:
            return kept[heads].copy()
        return self.pooled_maps((f,), heads)[0]

    def pooled_maps(self, fs: Sequence[int], heads: slice = slice(None)) -> list[np.ndarray]:
        """The maps of pooled_map for each tile side in ``fs``, computed in one pass over the scores from q, k and the
        rows' log-sum-exp (row_lse; a call recorded without it: computed from its rows first), never a whole
        [h, n, n] (tile_pool.pooled_maps); every head's small maps are kept in ``pooled``.
        Shapes: returns [h', ceil(q_pos/f), ceil(k_pos/f)] float32 for each f."""
        h = int(self.q.shape[1])
        idx = torch.arange(h)[heads]  # the query heads, and their K/V heads
        kv = idx // (h // int(self.k.shape[1]))
        allowed = None if self.allowed is None else allowed_of(self.allowed)

        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[:1] if t.shape[1] == 1 else t[:1, idx]

        with torch.no_grad():
            lse = self.row_lse
            if lse is None:
                lse = row_lse(self.q[:1, idx], self.k[:1, kv], self.scaling, self.softcap, pick(self.bias),
                              pick(allowed), None if self.sink is None else self.sink[idx])  # fmt: skip
            else:
                lse = lse[:1, idx]
            maps = [m.numpy() for m in pooled_maps(self.q[:1, idx], self.k[:1, kv], lse, fs, self.scaling,
                                                   self.softcap, pick(self.bias), pick(allowed),
                                                   self.sink is not None)]  # fmt: skip
        if len(idx) == h:
            for f, m in zip(fs, maps, strict=True):
                self.keep_pooled(f, m)
        return maps

    def keep_pooled(self, f: int, tiles: np.ndarray) -> None:
        """Keeps every head's map at tile side f (when small: at most POOLED_KEEP_BYTES) for later views; the oldest
        side goes past POOLED_KEEP_SIDES."""
        if tiles.nbytes > POOLED_KEEP_BYTES:
            return
        self.pooled[f] = tiles.copy()
        for old in list(self.pooled)[:-POOLED_KEEP_SIDES]:  # a view and ui/pool_ahead.py may keep maps at once
            self.pooled.pop(old, None)

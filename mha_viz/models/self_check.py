"""Every recorded attention call is checked: our pattern, recomputed from the q, k, mask and scaling the model used,
against the weights the model itself computed (max |difference| over every row the model computed, rows whose keys
are all masked included: they are recomputed as the model's eager softmax gives them), a block of query rows at a
time."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from mha_viz.attention import attention_pattern
from mha_viz.pooling import block_means, pool_factor

if TYPE_CHECKING:
    from mha_viz.models.call import Call


CHECK_BLOCK = 2**24  # elements of [h, rows, k_pos] compared at once (64 MB in float32)


def applied_weights(reported: torch.Tensor, pattern: torch.Tensor, sink: bool) -> torch.Tensor:
    """The weights a model applies to V, from the weights it reports. A model with learned sinks that reports the
    softmax before its sink (granite_swa: the sink scales the output instead, by sigmoid(logsumexp − sink) =
    Σ / (Σ + e^sink)) applies those rows times our rows' sums (1 − the sink's share); every other model reports
    what it applies. Shapes: reported and pattern [..., q, k] (ours, with the sink); returns [..., q, k]."""
    if sink and torch.allclose(reported.sum(-1), torch.ones((), dtype=reported.dtype)):
        return reported * pattern.sum(-1, keepdim=True)
    return reported


def self_check(call: Call, weights: torch.Tensor, tile_cells: int = 0) -> float:
    """max |our pattern - the model's weights| over every row, a block of query rows at a time (so a long
    text never needs a second and third [b, h, q_pos, k_pos] copy). With ``tile_cells``, our pattern's block
    means (batch item 0) are kept in call.tiles on the way (pooling.block_means).
    Shapes: weights [b, h, q_pos, k_pos]."""
    b, h, n, nk = weights.shape
    f = pool_factor(n, nk, tile_cells) if tile_cells else 1
    rows = max(f, CHECK_BLOCK // max(1, b * h * nk) // f * f)  # whole f-blocks of rows
    tiles = []
    worst = 0.0
    for r in range(0, n, rows):
        sl = slice(r, r + rows)

        def part(t: torch.Tensor | None, sl: slice = sl) -> torch.Tensor | None:  # [..., q|1, k]: these rows
            return None if t is None or t.shape[-2] == 1 else t[..., sl, :]

        _, pattern, _ = attention_pattern(
            call.q[..., sl, :], call.k, scale=call.scaling, softcap=call.softcap, bias=part(call.bias),
            allowed=part(call.allowed), sink=call.sink,
        )  # fmt: skip
        if tile_cells:
            tiles.append(block_means(pattern[0].numpy(), f))  # [h, rows / f, ceil(nk / f)]
        theirs = applied_weights(
            weights[..., sl, :].detach().to(device="cpu", dtype=torch.float32), pattern, call.sink is not None
        )  # [b, h, rows, k]
        diff = pattern.sub_(theirs).abs_()  # in place: our fresh pattern is not kept; every row, fully masked too
        block = float(diff.max()) if diff.numel() else 0.0
        if block != block:  # NaN: reported as is (the trace refuses it)
            return block
        worst = max(worst, block)
    if tile_cells:
        call.tiles, call.tile_f = np.concatenate(tiles, axis=-2), f
    return worst

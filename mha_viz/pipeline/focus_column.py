"""One key's column in every layer × head (the found head's look at every layer: ui/found.py) from a long recording's
statistics: w_ik = exp(s_ik − lse_i) for the chosen query rows and the one key, never the rows' whole scores.

A long text's page after its recording looked for the found head by computing 256 query rows' whole rows in each of
the 30 layers (pipeline.rows.focus_column: 9 × 256 × 8,192 scores, a softmax and a mask a layer) to keep one column:
8.8 s of the page at 8,192 tokens. From the recorded q, k and each row's log-sum-exp (Call.row_lse, kept for every
tiled call) the column is 9 × 256 scores a layer, the same exact weights the zoom shows (tiles.window_weights). A call
without the statistics, or a what-if that changes the weights, goes the old way (pipeline.rows.focus_column)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mha_viz.config import Config
from mha_viz.models.call import Call
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import rows as long_rows
from mha_viz.pipeline.road import Recording, check_match
from mha_viz.pipeline.zoom import from_statistics
from mha_viz.tiles import allowed_of, item_rows, whole_row_dead, window_weights
from mha_viz.trace import MhaVizError


def call_column(call: Call, index: torch.Tensor, k: int, dead: torch.Tensor | None = None) -> torch.Tensor:
    """Batch item 0's exact weights of query rows ``index`` on key ``k`` from q, k and the rows' log-sum-exp; a row
    that sees no key at all (``dead``, else read from the mask) gets the eager softmax's 1 / n_k (0 with a learned
    sink). Shapes: index [r], dead [1, h|1, r|1]; returns [h, r] float32."""
    allowed = None if call.allowed is None else allowed_of(call.allowed)
    if dead is None:
        dead = whole_row_dead(allowed, index)  # [1, h|1, r|1]
    key = slice(k, k + 1)
    w = window_weights(call.q[:1, :, index], call.k[:1, :, key], call.row_lse[:1, :, index], call.scaling, call.softcap,
                       item_rows(call.bias, index, key), item_rows(allowed, index, key), call.sink is not None,
                       int(call.k.shape[-2]), dead)  # fmt: skip
    return w[0, :, :, 0]


def focus_column(
    lm: LoadedModel, rec: Recording, part: str | None, config: Config, k: int, queries: Sequence[int] | None = None
) -> np.ndarray:
    """Query rows' (default: every query's) weight on key ``k`` in every layer × head, as
    pipeline.rows.focus_column, from the statistics where every layer has them and no what-if changes the weights.
    Shapes: returns [L, H, n_queries] float32."""
    part = lm.part(part)
    calls = [rec.run.calls[(part, layer)] for layer in range(lm.n_layers(part))]
    if not all(c.row_lse is not None and from_statistics(c, config, "weight") for c in calls):
        return long_rows.focus_column(lm, rec, part, config, k, queries)
    out = []
    dead: dict[int, torch.Tensor | None] = {}  # by mask: every layer of a long recording shares one (Call.allowed)
    with torch.no_grad():
        for layer, call in enumerate(calls):
            check_match(lm, call, part, layer)  # a pattern that does not match the model is never shown
            n = int(call.q.shape[-2])
            index = torch.arange(n) if queries is None else torch.as_tensor(list(queries), dtype=torch.long)
            if id(call.allowed) not in dead:
                mask = None if call.allowed is None else allowed_of(call.allowed)
                dead[id(call.allowed)] = whole_row_dead(mask, index)
            out.append(call_column(call, index, k, dead[id(call.allowed)]).numpy())
    column = np.stack(out)  # [L, H, r]
    if not np.isfinite(column).all():
        raise MhaVizError(f"{lm.name}'s attention in {part} overflowed; nothing is shown rather than NaN")
    return column

"""Views at length (issue 38 §3): a window of one layer's exact weights (some query rows × some keys) and one
layer's pooled exact map, from the recorded q, k and each row's softmax statistics (mha_viz.tiles), never a whole
[h, n, n]. A call recorded in tiles keeps its rows' log-sum-exp (Call.row_lse); another call's are computed for the
window's rows alone (tiles.row_lse). With a what-if that changes the weights (re-split heads, an added causal mask,
no scaling, another device or dtype) or the contribution measure, the rows come from pipeline.rows.layer_rows (the
same engine as pipeline.layer_trace) and the window is cut from them."""

from __future__ import annotations

import numpy as np
import torch

from mha_viz.attention import resolve_device, resolve_dtype
from mha_viz.config import Config
from mha_viz.models.call import Call
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import rows as long_rows
from mha_viz.pipeline.road import Recording, check_match
from mha_viz.pooling import block_means
from mha_viz.tiles import allowed_of, item_rows, row_lse, whole_row_dead, window_weights
from mha_viz.trace import MhaVizError


def from_statistics(call: Call, config: Config, measure: str) -> bool:
    """Whether the window is rebuilt from q, k and the statistics: the weights as recorded (no what-if on them)."""
    if measure != "weight" or config.heads not in (None, int(call.q.shape[1])) or config.causal or not config.scaled:
        return False
    return resolve_device(config.device).type == "cpu" and resolve_dtype(config.dtype) == torch.float32


def _lse(call: Call, rows: slice) -> torch.Tensor:
    """The rows' log-sum-exp: recorded (a tiled call), else from those rows' whole scores. Shapes: [1, h, r]."""
    if call.row_lse is not None:
        return call.row_lse[:1, :, rows]
    allowed = None if call.allowed is None else allowed_of(call.allowed)
    return row_lse(call.q[:1, :, rows], call.k[:1], call.scaling, call.softcap, item_rows(call.bias, rows),
                   item_rows(allowed, rows), call.sink)  # fmt: skip


def call_window(call: Call, rows: slice, keys: slice) -> torch.Tensor:
    """Batch item 0's exact weights of ``rows`` × ``keys`` from q, k and the rows' statistics.
    Shapes: returns [h, r, c] float32."""
    allowed = None if call.allowed is None else allowed_of(call.allowed)
    return window_weights(call.q[:1, :, rows], call.k[:1, :, keys], _lse(call, rows), call.scaling, call.softcap,
                          item_rows(call.bias, rows, keys), item_rows(allowed, rows, keys), call.sink is not None,
                          int(call.k.shape[-2]), whole_row_dead(allowed, rows))[0]  # fmt: skip


def window(
    lm: LoadedModel, rec: Recording, part: str | None, layer: int, config: Config, rows: slice, keys: slice,
    measure: str = "weight",
) -> np.ndarray:  # fmt: skip
    """One layer's exact weights (or contribution shares) of query ``rows`` × ``keys``, every head.
    Shapes: returns [h, r, c] float32."""
    part = lm.part(part)
    call = rec.run.calls[(part, layer)]
    if not from_statistics(call, config, measure):
        return long_rows.layer_rows(lm, rec, part, layer, config, rows, measure)[..., keys]
    check_match(lm, call, part, layer)  # a pattern that does not match the model is never shown
    with torch.no_grad():
        w = call_window(call, rows, keys).numpy()
    if not np.isfinite(w).all():
        raise MhaVizError(f"{lm.name}'s attention in {part} layer {layer} overflowed; nothing is shown rather than NaN")
    return w


def layer_pooled(
    lm: LoadedModel, rec: Recording, part: str | None, layer: int, config: Config, f: int,
    heads: slice = slice(None), measure: str = "weight",
) -> np.ndarray:  # fmt: skip
    """One layer's pattern (the heads ``heads``) as f×f tile means of its exact weights: the tiles a short call's
    self-check kept when they are these, else computed on demand from the statistics (Call.pooled_map: the caller
    caches it), else (a what-if on the weights) from chunks of rows (pipeline.rows).
    Shapes: returns [h', ceil(n_q/f), ceil(n_k/f)] float32."""
    part = lm.part(part)
    call = rec.run.calls[(part, layer)]
    n, n_k = int(call.q.shape[-2]), int(call.k.shape[-2])
    if not from_statistics(call, config, measure):
        step = max(f, long_rows.CHUNK_CELLS // max(1, int(call.q.shape[1]) * n_k) // f * f)
        parts = [block_means(long_rows.layer_rows(lm, rec, part, layer, config, slice(r, min(n, r + step)),
                                                  measure)[heads], f) for r in range(0, n, step)]  # fmt: skip
        return np.concatenate(parts, axis=-2).astype(np.float32)
    check_match(lm, call, part, layer)
    if call.tiles is not None and call.tile_f == f:
        return call.tiles[heads]
    return call.pooled_map(f, heads)

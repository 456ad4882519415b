"""The dashboard's caches for views at length (issue 38 §3): one layer's pooled exact maps and one zoom window,
read from the selected layer's recorded call (inside a long text's first-layer block, its partial recording: the
whole pass is not waited for). mha_viz.pipeline.zoom computes them from q, k and each row's softmax statistics."""

from __future__ import annotations

import numpy as np

from mha_viz.config import Config
from mha_viz.pipeline.road import layer_of
from mha_viz.selection import Selection
from mha_viz.ui.cache import model_of, recording_of
from mha_viz.ui.memo import sized_cache


@sized_cache(max_entries=16, max_mb=16)
def get_layer_pooled(
    sel: Selection, f: int, heads: tuple[int, int] | None = None, measure: str = "weight"
) -> np.ndarray:
    """The selected layer's f×f tile means of its exact weights, heads [a, b) (all when None).
    Shapes: [h', ceil(n_q/f), ceil(n_k/f)] float32."""
    from mha_viz.pipeline import zoom

    rec = recording_of(sel, one_layer=True)
    sl = slice(None) if heads is None else slice(*heads)
    return zoom.layer_pooled(model_of(sel.config), rec, sel.part, int(sel.layer or 0), sel.config, f, sl, measure)


@sized_cache(max_entries=16, max_mb=32)
def get_window(sel: Selection, rows: tuple[int, int], keys: tuple[int, int], measure: str = "weight") -> np.ndarray:
    """The selected layer's exact weights of query rows [a, b) × keys [c, d), every head. Shapes: [h, r, c]."""
    from mha_viz.pipeline import zoom

    rec = recording_of(sel, one_layer=True)
    return zoom.window(model_of(sel.config), rec, sel.part, int(sel.layer or 0), sel.config, slice(*rows),
                       slice(*keys), measure)  # fmt: skip


@sized_cache(max_entries=16, max_mb=8)
def get_focus_row(sel: Selection, q: int, measure: str = "weight") -> np.ndarray:
    """Query q's whole row in every head of the selected layer. Shapes: [h, n_k] float32."""
    from mha_viz.pipeline import zoom

    lm = model_of(sel.config)
    at = layer_of(lm, recording_of(sel, one_layer=True), sel.at(layer=int(sel.layer or 0)))  # resolved once
    n_k = int(at.call.k.shape[-2])
    return zoom.window(lm, at.rec, at.part, at.layer, sel.config, slice(q, q + 1), slice(0, n_k), measure)[:, 0]


@sized_cache(max_entries=8, max_mb=8)
def get_offsets(config: Config, text: str, ids: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
    """Each token's (start, end) characters in ``text`` as the model's tokenizer says (its offset_mapping), when
    that tokenisation is ``ids`` (the recorded tokens); None where the tokenizer has no offsets or its tokens differ
    (a decoder's text, word tokens)."""
    tokenizer = model_of(config).tokenizer
    try:
        enc = tokenizer(text, add_special_tokens=True, truncation=True, max_length=len(ids),
                        return_offsets_mapping=True)  # fmt: skip
    except (NotImplementedError, ValueError, TypeError):  # a slow tokenizer has no offsets
        return None
    if tuple(int(i) for i in enc["input_ids"]) != tuple(ids):
        return None
    return tuple((int(s), int(e)) for s, e in enc["offset_mapping"])

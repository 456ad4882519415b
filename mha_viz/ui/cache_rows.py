"""The dashboard's caches of a text's rows and maps without every layer's [H, n, n] at once (mha_viz.pipeline.rows):
one query's weights in every layer × head, one key's column, pooled tiles, each layer's role labels. Long texts
(a slim recording) compute them layer by layer; own weights from their one traced layer.

Each getter takes the page's Selection and keys on ``sel.at_every_layer()``: what reads every layer is computed once,
whichever layer is shown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from mha_viz.pipeline.road import Tokens
from mha_viz.pooling import block_means, pool_factor
from mha_viz.selection import Selection
from mha_viz.ui.cache import get_trace, model_of, own_patterns, recording_of
from mha_viz.ui.memo import sized_cache


def get_focus_weights(sel: Selection, q: int, k: int, measure: str = "weight") -> np.ndarray:
    """Query q's weight (or contribution share) on key k in every layer × head. Shapes: [L, H] float32."""
    return _focus_weights(sel.at_every_layer(), q, k, measure)


@sized_cache(max_entries=32, max_mb=4)
def _focus_weights(sel: Selection, q: int, k: int, measure: str) -> np.ndarray:
    from mha_viz.pipeline import rows

    if sel.config.own:
        return own_patterns(sel.config, sel.text, measure)[:, :, q, k]
    return rows.focus_weights(model_of(sel.config), recording_of(sel), sel.part, sel.config, q, k, measure)


def get_focus_column(sel: Selection, k: int, queries: tuple[int, ...] | None = None) -> np.ndarray:
    """Query rows' (default: every query's) weight on key k in every layer × head (pretrained models).
    Shapes: [L, H, n_queries] float32."""
    return _focus_column(sel.at_every_layer(), k, queries)


@sized_cache(max_entries=16, max_mb=16)
def _focus_column(sel: Selection, k: int, queries: tuple[int, ...] | None) -> np.ndarray:
    from mha_viz.pipeline import focus_column  # a long recording's column from its statistics, not whole rows

    return focus_column.focus_column(model_of(sel.config), recording_of(sel), sel.part, sel.config, k, queries)


_TOLD: ContextVar[Callable[[int, int], None] | None] = ContextVar("mha_viz_pooling_progress", default=None)


@contextmanager
def pooling_progress(told: Callable[[int, int], None]) -> Iterator[None]:
    """get_pooled_patterns calls ``told(done, total)`` after each layer it computes inside the block (a cache hit:
    never): a long text's pooled maps are computed on demand, seconds a layer."""
    token = _TOLD.set(told)
    try:
        yield
    finally:
        _TOLD.reset(token)


def get_pooled_patterns(
    sel: Selection, max_cells: int, measure: str = "weight", keep: tuple[int, ...] | None = None,
    keep_k: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, int]:  # fmt: skip
    """Every layer's pattern block-averaged to at most ``max_cells`` per side (rows ``keep`` and keys ``keep_k``
    only, renormalised; None: all). Shapes: ([L, H, m_q, m_k] float32, block side f)."""
    return _pooled_patterns(sel.at_every_layer(), max_cells, measure, keep, keep_k)


@sized_cache(max_entries=16, max_mb=64)
def _pooled_patterns(
    sel: Selection, max_cells: int, measure: str, keep: tuple[int, ...] | None, keep_k: tuple[int, ...] | None
) -> tuple[np.ndarray, int]:
    from mha_viz.pipeline import rows

    if sel.config.own:
        p = own_patterns(sel.config, sel.text, measure)  # [1, H, n, n]
        p = p if keep is None else p[:, :, list(keep)]
        p = rows.renormalised(p, None if keep_k is None else np.asarray(keep_k))
        f = pool_factor(p.shape[-2], p.shape[-1], max_cells)
        return block_means(p, f), f
    return rows.pooled_patterns(
        model_of(sel.config), recording_of(sel), sel.part, sel.config, max_cells, measure, keep, keep_k, _TOLD.get()
    )


@sized_cache(max_entries=64, max_mb=1)
def get_role_labels(sel: Selection, tokens: Tokens) -> tuple[str, ...]:
    """Each head's role label from this layer's own pattern (roles.head_roles; the Heads grid's titles), computed
    once per layer: at 2048 tokens it reads 9 × 2048 × 2048 weights. ``tokens``: the layer's query tokens."""
    from mha_viz.analysis.roles import head_roles, is_punctuation

    special = np.asarray(tokens.special, dtype=bool)
    names = [p for p, s in zip(tokens.pieces, tokens.special, strict=True) if s]
    punct = np.asarray([is_punctuation(p) for p in tokens.pieces], dtype=bool)
    pattern = get_trace(sel, x=False).pattern.numpy()  # [h, n, n]
    return tuple(str(label) for label in head_roles(pattern, special, punct, names, tokens.ids)["label"])


def get_focus_rows(sel: Selection, q: int) -> np.ndarray:
    """Query q's row of every layer × head's weights. Shapes: [L, H, n_k] float32."""
    return _focus_rows(sel.at_every_layer(), q)


@sized_cache(max_entries=32, max_mb=16)
def _focus_rows(sel: Selection, q: int) -> np.ndarray:
    from mha_viz.pipeline import rows

    if sel.config.own:
        return own_patterns(sel.config, sel.text)[:, :, q]
    return rows.focus_rows(model_of(sel.config), recording_of(sel), sel.part, sel.config, q)

"""The two claims of the source articles as pictures: h = 1 with W^O = I against plain self-attention, and any
equivalence (two matrices and their difference), with where this layer's W^O comes from in words. Drawn by the Lesson
and W^O (a shared ui module: no view imports another view)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import streamlit as st

from mha_viz.analysis.lesson import wo_origin
from mha_viz.studies.claims import Equivalence, identity_blocker
from mha_viz.ui.cache_studies import get_identity_pair
from mha_viz.ui.common import cached_figure, plot
from mha_viz.ui.context import Ctx


def wo_words(ctx: Ctx) -> str:
    c = ctx.config
    return wo_origin(ctx.base.own, c.init, bool(c.weights_file), c.seed)


def show_identity_claim(
    ctx: Ctx,
    rows: tuple[str, ...],
    key: str,
    say: Callable[[str], object],
    hint: str = "",
    window: slice | None = None,
    chart: bool = True,
) -> None:
    """Claim (b) as a picture: h = 1 with W^O = I against plain self-attention, or (via ``say``) why this layer
    cannot show it. ``chart=False``: its result in words only (the matrices drawn elsewhere, on demand)."""
    b = ctx.base
    blocker = identity_blocker(b.plain, b.n_heads, b.n_kv_heads, b.d_head, b.d_model)
    if blocker:
        say(f"Not shown for this layer: {blocker}.{hint}")
        return
    one = get_identity_pair(ctx.sel)
    if not chart:
        st.caption(result_words(one))
        return
    if window is not None and window.stop - window.start < len(rows):
        one, rows = (
            dataclasses.replace(one, left=one.left[window], right=one.right[window], note=one.note + all_rows(one)),
            rows[window],
        )
    show_equivalence(one, rows, "h = 1 and W^O = I vs plain single-head self-attention", key, ctx.image_format)


def show_equivalence(eq: Equivalence, rows: tuple[str, ...], title: str, key: str, image_format: str) -> None:
    """Both matrices and their difference, with the largest difference in words."""
    fig = cached_figure("comparison", eq.left, eq.right, (eq.left_name, eq.right_name), tuple(rows), title)
    plot(fig, key, image_format)
    st.caption(result_words(eq))


def result_words(eq: Equivalence) -> str:
    """An equivalence's result in words: its note and the largest difference."""
    return f"{eq.note} Largest |difference|: {eq.max_diff:.2e} (float64 rounding: the same computation)."


def all_rows(eq: Equivalence) -> str:
    """What a windowed comparison leaves out, in words."""
    return f" Shown: the window's rows; over all {eq.left.shape[0]} rows the largest |difference| is {eq.max_diff:.2e}."

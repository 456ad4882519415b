"""The Step by step tab: one head's computation, from X to the layer's output, matrix by matrix."""

from __future__ import annotations

import streamlit as st

from mha_viz.analysis.plans.step_by_step import step_arrays, step_notes
from mha_viz.analysis.steps import head_steps, numbered
from mha_viz.config import WINDOW_ROWS
from mha_viz.figures.heatmap import HALF_ROW_TITLE_CHARS as TITLE_CHARS
from mha_viz.pipeline import road as pipeline
from mha_viz.selection import Selection
from mha_viz.ui.cache import get_own_weights, model_of, recording_of
from mha_viz.ui.common import downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.figure_cache import finished_stack, panel
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.opened import follow_head
from mha_viz.ui.timing import timed_fragment
from mha_viz.ui.variant_section import variant_section
from mha_viz.ui.window import row_window


@sized_cache(max_entries=32, max_mb=1)
def layer_biases(sel: Selection) -> tuple[str, ...]:
    """Which of b_Q, b_K, b_V a plain-linear layer has (its weights are read once, not kept)."""
    if sel.config.own:
        w = get_own_weights(sel.config)
    else:
        w = pipeline.layer_of(model_of(sel.config), recording_of(sel, one_layer=True), sel).weights()
    return tuple(n for n in ("b_Q", "b_K", "b_V") if getattr(w, n) is not None)


def step_view(ctx: Ctx) -> None:
    ctx.hiding_not_applied("every step shows the matrices exactly as the model computes them.")
    _one_head(ctx)


@st.fragment
@timed_fragment
def _one_head(ctx: Ctx) -> None:
    """The head picker and its steps: a fragment, so choosing another head reruns only this part."""
    t = ctx.trace()
    h, n, _ = t.q.shape
    took = follow_head(ctx, "step_head", h)  # the opened head (a choice here opens it everywhere)
    i = int(
        st.selectbox("Head", list(range(h)), key="step_head", format_func=lambda j: f"head {j}", bind="query-params",
                     on_change=took)
    )  # fmt: skip
    for note in step_notes(t, i, ctx.where, ctx.base.plain):
        st.caption(note)
    tok, keys = list(t.tokens), list(t.key_tokens)
    plain = ctx.base.plain
    biases = layer_biases(ctx.sel) if plain else ()
    steps = head_steps(t, i, ctx.config.scaled, plain, biases)
    rows = row_window(n, WINDOW_ROWS, "step_rows", "each matrix whose rows are the query tokens")
    cut = "" if rows.stop - rows.start == n else f", rows {rows.start}–{rows.stop - 1}"
    figures = [
        panel(
            s.z if s.key_rows else s.z[rows],
            keys if s.keys else None,
            keys if s.key_rows else tok[rows],
            f"{title}   {s.shape}{'' if s.key_rows else cut}",
            diverging=s.signed,
            value_name=s.name,
            attention=s.name == "weight",
            height=380,
            title_chars=TITLE_CHARS,
        )
        for s, title in zip(steps, numbered(steps), strict=True)
    ]
    plot(finished_stack(tuple(figures)), "step", ctx.image_format)  # one chart: the rows of matrices, stacked
    variant_section(ctx, t, i, rows, "step_variant")
    downloads("step", npz=step_arrays(t, i))

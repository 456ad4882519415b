"""The Head count tab: the layer's projections re-split into another number of heads (a what-if)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.plans import head_count as plan
from mha_viz.edits import divisors
from mha_viz.pipeline.budget import check_grid
from mha_viz.ui.cache_studies import MAX_SWEEP_HEADS, get_sweep, sweep_counts
from mha_viz.ui.choices import valid_choice
from mha_viz.ui.common import cached_figure, csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.timing import timed_fragment


def headcount_view(ctx: Ctx) -> None:
    w = ctx.base
    width = w.n_heads * w.d_head
    refused = plan.refusal(w.n_heads, w.n_kv_heads, w.plain)
    if refused:
        st.info(refused)
        return
    counts = sweep_counts(width)
    p = plan.head_count_plan(width, divisors(width), MAX_SWEEP_HEADS, w.n_heads, w.own, w.model_name)
    st.markdown(p.counts_text)
    (st.warning if p.warn else st.info)(p.what_if)
    _resplit(ctx, counts)


@st.fragment
@timed_fragment
def _resplit(ctx: Ctx, counts: list[int]) -> None:
    """The head count picker and what it shows: a fragment, so a new count reruns only this part."""
    w = ctx.base
    width = w.n_heads * w.d_head
    valid_choice("hc", counts, w.n_heads)
    hc = int(st.selectbox("Head count", counts, key="hc", bind="query-params"))
    check_grid(hc)
    t = ctx.trace(heads=hc)
    sh = ctx.shown(t)
    st.caption(plan.resplit_caption(ctx.layer, hc, width))
    if sh.note:
        st.info(sh.note)
    grid = cached_figure("heads_grid", sh.pattern, tuple(sh.labels), None, plan.grid_columns(hc), False)
    plot(grid, "headcount_grid", ctx.image_format)
    sweep = get_sweep(ctx.sel)
    series = plan.sweep_series(sweep)
    summary = cached_figure(
        "line_chart", sweep["heads"], series, "Across head counts (same weights, re-split)", "heads"
    )
    plot(summary, "headcount_summary", ctx.image_format)
    st.caption(
        "Fewer heads: each softmax sees more dimensions and attention tends to collapse onto one pattern; more heads: "
        "each subspace is smaller. Output change: |output − original output| / |original output| over all tokens."
    )
    downloads(
        "headcount",
        npz={"tokens": np.asarray(sh.labels, dtype=str), "pattern": sh.pattern},
        csv_data=lambda: csv_bytes(
            ["heads", "mean_entropy_nats", "mean_max_weight", "output_change"], plan.sweep_rows(sweep)
        ),
    )

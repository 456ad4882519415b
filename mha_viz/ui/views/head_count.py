"""The Head count tab: the layer's projections re-split into another number of heads (a what-if)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.edits import divisors
from mha_viz.figures.common import plural
from mha_viz.pipeline.budget import check_grid
from mha_viz.ui.cache_studies import MAX_SWEEP_HEADS, get_sweep, sweep_counts
from mha_viz.ui.choices import valid_choice
from mha_viz.ui.common import cached_figure, csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.timing import timed_fragment


def headcount_view(ctx: Ctx) -> None:
    w = ctx.base
    width = w.n_heads * w.d_head
    if w.n_kv_heads != w.n_heads:
        st.info(
            f"This layer shares {plural(w.n_kv_heads, 'key/value head')} among {plural(w.n_heads, 'query head')} "
            "(grouped-query attention), so its heads cannot be re-split into another count."
        )
        return
    if not w.plain:
        st.info(
            "This layer's queries and keys are not plain linear maps of its input X (rotary position embeddings, "
            "QK-norm, or cross-attention from another text), so re-splitting its projections into another head "
            "count has no single meaning here. The other views show what the model computes."
        )
        return
    counts = sweep_counts(width)
    st.markdown(
        f"The layer's {width} query/key/value columns can be grouped into any head count that divides {width}: "
        f"**{', '.join(map(str, divisors(width)))}** (d_k = {width} / heads). "
        f"This explorer offers the counts up to {MAX_SWEEP_HEADS}."
    )
    if ctx.base.own:
        st.info(
            "Own weights: the head count is simply a parameter. Xavier initialisation draws the same "
            "Q|K|V matrix whatever the head count, so re-splitting here equals initialising with that many heads."
        )
    else:
        st.warning(
            f"What-if: {ctx.base.model_name} was trained with {plural(w.n_heads, 'head')}. Re-splitting its "
            "projections into another count keeps every weight but changes which dimensions are softmaxed "
            "together — it is not what the model computes."
        )
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
    st.caption(f"Layer {ctx.layer} re-split into {plural(hc, 'head')} of d_k = {width // hc}.")
    if sh.note:
        st.info(sh.note)
    cols = 4 if hc <= 16 else 8
    grid = cached_figure("heads_grid", sh.pattern, tuple(sh.labels), None, cols, False)
    plot(grid, "headcount_grid", ctx.c.image_format)
    sweep = get_sweep(ctx.config, ctx.c.text, ctx.target, ctx.part, ctx.layer)
    series = {
        "mean entropy (nats)": sweep["mean_entropy"],
        "mean largest weight": sweep["mean_max_weight"],
        "output change vs original": sweep["output_change"],
    }
    summary = cached_figure(
        "line_chart", sweep["heads"], series, "Across head counts (same weights, re-split)", "heads"
    )
    plot(summary, "headcount_summary", ctx.c.image_format)
    st.caption(
        "Fewer heads: each softmax sees more dimensions and attention tends to collapse onto one pattern; more heads: "
        "each subspace is smaller. Output change: |output − original output| / |original output| over all tokens."
    )
    downloads(
        "headcount",
        npz={"tokens": np.asarray(sh.labels, dtype=str), "pattern": sh.pattern},
        csv_data=lambda: csv_bytes(
            ["heads", "mean_entropy_nats", "mean_max_weight", "output_change"],
            list(zip(sweep["heads"], *series.values(), strict=True)),
        ),
    )

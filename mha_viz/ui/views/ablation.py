"""The Ablation tab: the whole model run with some heads zeroed, against the intact model."""

from __future__ import annotations

import streamlit as st

from mha_viz.analysis.plans import ablation as plan
from mha_viz.config import PART_NAMES
from mha_viz.figures import token_bars
from mha_viz.ui.cache_studies import get_ablation
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.opened import follow_head


def ablation_view(ctx: Ctx) -> None:
    L, H = ctx.base.n_layers, ctx.base.n_heads
    c1, c2 = st.columns(2)
    took = follow_head(ctx, "abl_heads", H, layer_key="abl_layers", many=True)  # the opened head, in its layer
    layers = c1.multiselect("Layers", list(range(L)), key="abl_layers", bind="query-params", on_change=took)
    heads = c2.multiselect("Heads to zero in those layers", list(range(H)), key="abl_heads", bind="query-params",
                           on_change=took)  # fmt: skip
    zeroed = plan.zeroed(ctx.part, layers, heads)
    st.caption(plan.ablation_caption(PART_NAMES[ctx.part]))
    effect = get_ablation(ctx.config, ctx.text, ctx.target, zeroed)
    p = plan.ablation_plan(effect)
    if p.cosine is not None:
        st.metric("Sentence embedding: cosine to the intact model", p.cosine)
    else:
        t1, t2 = st.columns(2)
        t1.markdown("**Next token, intact**")
        t1.table(p.before)
        t2.markdown("**Next token, heads ablated**")
        t2.table(p.after)
    bars = token_bars(effect["tokens"], {"|Δ hidden| / |hidden|": effect["token_change"]}, p.bars)
    plot(bars, "ablation_change", ctx.image_format)
    downloads("ablation", csv_data=csv_bytes(["token", "relative_change"], p.rows))

"""The Ablation tab: the whole model run with some heads zeroed, against the intact model."""

from __future__ import annotations

import streamlit as st

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
    plan = tuple(((ctx.part, int(la)), tuple(int(h) for h in heads)) for la in layers) if heads else ()
    st.caption(
        f"The whole model runs with these heads ({PART_NAMES[ctx.part]}) zeroed on their way into W^O "
        "(for this run only; the shared weights are untouched)."
    )
    effect = get_ablation(ctx.config, ctx.c.text, ctx.target, plan)
    labels = effect["tokens"]
    if "embedding_cosine" in effect:
        st.metric("Sentence embedding: cosine to the intact model", f"{effect['embedding_cosine']:.4f}")
    else:
        t1, t2 = st.columns(2)
        t1.markdown("**Next token, intact**")
        t1.table({"token": [t for t, _ in effect["top_before"]], "p": [f"{p:.3f}" for _, p in effect["top_before"]]})
        t2.markdown("**Next token, heads ablated**")
        t2.table({"token": [t for t, _ in effect["top_after"]], "p": [f"{p:.3f}" for _, p in effect["top_after"]]})
    plot(
        token_bars(labels, {"|Δ hidden| / |hidden|": effect["token_change"]}, "Last hidden state change per token"),
        "ablation_change",
        ctx.c.image_format,
    )
    rows = [[labels[i], f"{v:.6g}"] for i, v in enumerate(effect["token_change"])]
    downloads("ablation", csv_data=csv_bytes(["token", "relative_change"], rows))

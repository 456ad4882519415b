"""The Rollout tab: attention rollout through the layers (Abnar & Zuidema 2020)."""

from __future__ import annotations

import streamlit as st

from mha_viz.analysis.patterns import rollout
from mha_viz.analysis.plans import rollout as plan
from mha_viz.figures import matrix_heatmap
from mha_viz.ui.common import downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.links import check_int


def rollout_view(ctx: Ctx) -> None:
    ctx.hiding_not_applied("rollout multiplies whole attention matrices through the layers, so every token stays in.")
    roll = rollout(ctx.patterns(follow_measure=True))  # [L, n, n]
    ctx.measure_note()
    labels = ctx.base.tokens.labels
    p = plan.rollout_plan(roll.shape[0], st.session_state.get("rollout_layer"))
    upto = 0
    if p.picker:
        bind = check_int("rollout_layer", 0, p.default, p.default)  # None: the link's value is ignored, not truncated
        if p.reset is not None:  # a layer left from a model with more layers: the last one here
            st.session_state["rollout_layer"] = p.reset
        upto = st.slider("Up to layer", 0, p.default, p.default, key="rollout_layer", bind=bind)
    st.caption(
        "Attention rollout (Abnar & Zuidema 2020): per layer, average the heads, add the residual connection as "
        "an identity (Â = 0.5·A + 0.5·I, rows renormalised), and multiply the layers: rollout = Â_l · … · Â_0. "
        "Row i estimates how much each input token flows into position i by that layer."
    )
    fig = matrix_heatmap(roll[upto], labels, labels, plan.rollout_title(upto), value_name="share", attention=True)
    plot(fig, "rollout", ctx.image_format)
    downloads("rollout", npz=plan.rollout_arrays(labels, roll))

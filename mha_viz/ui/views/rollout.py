"""The Rollout tab: attention rollout through the layers (Abnar & Zuidema 2020)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.patterns import rollout
from mha_viz.figures import matrix_heatmap
from mha_viz.ui.common import downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.links import check_int


def rollout_view(ctx: Ctx) -> None:
    ctx.hiding_not_applied("rollout multiplies whole attention matrices through the layers, so every token stays in.")
    p = ctx.patterns(follow_measure=True)
    ctx.measure_note()
    roll = rollout(p)  # [L, n, n]
    labels = ctx.base.tokens.labels
    L = roll.shape[0]
    upto = 0
    if L > 1:
        bind = check_int("rollout_layer", 0, L - 1, L - 1)  # None: the link's value is ignored, not read truncated
        if st.session_state.get("rollout_layer", 0) > L - 1:  # left from a model with more layers
            st.session_state["rollout_layer"] = L - 1
        upto = st.slider("Up to layer", 0, L - 1, L - 1, key="rollout_layer", bind=bind)
    st.caption(
        "Attention rollout (Abnar & Zuidema 2020): per layer, average the heads, add the residual connection as "
        "an identity (Â = 0.5·A + 0.5·I, rows renormalised), and multiply the layers: rollout = Â_l · … · Â_0. "
        "Row i estimates how much each input token flows into position i by that layer."
    )
    plot(
        matrix_heatmap(
            roll[upto], labels, labels, f"Rollout through layers 0–{upto}", value_name="share", attention=True
        ),
        "rollout",
        ctx.c.image_format,
    )
    downloads("rollout", npz={"tokens": np.asarray(labels, dtype=str), "rollout": roll.astype(np.float32)})

"""The Where does it look? tab: one query token's weight on one key token in every layer × head."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.ui.common import csv_bytes, downloads, layer_head_map
from mha_viz.ui.context import Ctx, needs_pretrained, valid_choice


def _open_head(layer: int, head: int) -> None:
    st.session_state.update(layer=layer, head=head, view="Heads")


def where_view(ctx: Ctx) -> None:
    if needs_pretrained(ctx, self_attention=False):
        return
    ctx.hiding_not_applied("the weights ranked are the model's own, over every token.")
    labels, key_labels = list(ctx.base.tokens.labels), list(ctx.base.key_tokens.labels)
    c1, c2 = st.columns(2)
    valid_choice("where_q", labels, "it" if "it" in labels else labels[0])
    valid_choice("where_k", key_labels, "animal" if "animal" in key_labels else key_labels[-1])
    q = labels.index(c1.selectbox("Query token", labels, key="where_q", bind="query-params"))
    k = key_labels.index(c2.selectbox("Key token", key_labels, key="where_k", bind="query-params"))
    p = ctx.patterns()  # [L, H, n_q, n_k]
    weights = p[:, :, q, k]  # [L, H]
    L, H = weights.shape
    title = f"“{labels[q]}” → “{key_labels[k]}”: weight in every layer × head"
    layer_head_map(weights, title, "weight", "where_map", ctx.c.image_format)
    order = np.argsort(-weights, axis=None)[:10]
    ranked = [(int(i // H), int(i % H), float(weights.flat[i])) for i in order]
    st.markdown("**Top heads** (rank, layer, head, weight):")
    for rank, (la, he, w) in enumerate(ranked, 1):
        a, b = st.columns([4, 1])
        a.write(f"{rank}. layer {la}, head {he}: {w:.3f}")
        b.button("Open", key=f"where_open_{rank}", on_click=_open_head, args=(la, he))
    rows = [[la, he, f"{weights[la, he]:.6g}"] for la in range(L) for he in range(H)]
    downloads("where", csv_data=csv_bytes(["layer", "head", "weight"], rows))

"""The Circuits tab: a head's QK circuit (where to look) and OV circuit (what is moved), from its weights."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.plans.circuits import circuit_notes, pair_tables
from mha_viz.figures import spectra
from mha_viz.studies import circuits
from mha_viz.ui.cache_studies import get_copying_map, get_head_weights, get_token_pairs
from mha_viz.ui.choices import clicked_points
from mha_viz.ui.common import csv_bytes, downloads, layer_head_map, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.opened import follow_head, open_head

CIRCUITS_TEXT = (
    "Head h scores query x_i against key x_j by x_i·W_Q^h·(x_j·W_K^h)ᵀ, so **W_Q^h·W_K^hᵀ** (the *QK circuit*, "
    "d_model × d_model) decides where it looks; what it moves from j to i is x_j·W_V^h·W_O^h, so **W_V^h·W_O^h** "
    "(the *OV circuit*) decides what is moved. Both have rank ≤ d_head; everything here is computed through the "
    "small d_head × d_head factors. **Copying score** = Re(Σλ)/Σ|λ| over the OV circuit's eigenvalues: 1 for a head "
    "that writes back what it reads (copying), −1 for one that suppresses it. Elhage et al. 2021, *A Mathematical "
    "Framework for Transformer Circuits*."
)


def _open_from_map() -> None:
    for _, custom in clicked_points("copy_map"):  # customdata (layer, head, value)
        if len(custom) >= 2:
            open_head(int(custom[0]), int(custom[1]), view=None)  # opened everywhere; the Head picker follows
            return


def circuits_view(ctx: Ctx) -> None:
    ctx.hiding_not_applied("circuits are properties of the weights, not of the tokens shown.")
    st.markdown(CIRCUITS_TEXT)
    w = get_head_weights(ctx.config, ctx.part, ctx.layer)
    h = w.W_O.shape[0]
    took = follow_head(ctx, "circ_head", h)  # the opened head (a choice here opens it everywhere)
    head = int(st.selectbox("Head", list(range(h)), key="circ_head", format_func=lambda i: f"head {i}",
                            bind="query-params", on_change=took))  # fmt: skip
    notes = circuit_notes(w.rotary, w.qk_note, w.ov_note, ctx.base.own)
    if notes.rotary:
        st.info(notes.rotary)
    for note in notes.not_shown:
        st.caption(note)
    qk, ov = circuits.qk_singular_values(w, head), circuits.ov_singular_values(w, head)
    plot(spectra(qk, ov, f"{ctx.where.capitalize()}, head {head}: singular values"), "spectra", ctx.image_format)
    score = circuits.head_copying_score(w, head)
    if score is not None:
        st.metric(f"Copying score of head {head}", f"{score:+.3f}")
    pairs = get_token_pairs(ctx.sel, head)
    ov_table, qk_table = pair_tables(pairs["ov"], pairs["qk"])
    c1, c2 = st.columns(2)
    if ov_table:
        c1.markdown(f"**OV: what each token of the text writes when attended to** (read through {pairs['ov_reads']})")
        c1.table(ov_table)
    if qk_table:
        c2.markdown("**QK: the query → key token pairs of this text the circuit favours most**")
        c2.table(qk_table)
    st.caption(notes.pairs)
    _copying_map(ctx, qk, ov)


def _copying_map(ctx: Ctx, qk: np.ndarray | None, ov: np.ndarray | None) -> None:
    """Every head's OV copying score (click to open), and the download with this head's singular values."""
    scores = get_copying_map(ctx.config, ctx.part)  # [L, H]
    if not np.isfinite(scores).all():
        st.info("The copying map needs every layer's V as a fixed linear map; this model's is not (see above).")
        return
    title = "OV copying score of every head; click a cell to open it here"
    layer_head_map(scores.astype(np.float32), title, "copying score", "copy_map", ctx.image_format,
                   on_select=_open_from_map, diverging=True)  # fmt: skip
    L, H = scores.shape
    rows = [[la, he, f"{scores[la, he]:.6g}"] for la in range(L) for he in range(H)]
    downloads(
        "circuits",
        npz={
            "qk_singular_values": np.asarray([] if qk is None else qk),
            "ov_singular_values": np.asarray([] if ov is None else ov),
            "copying_scores": scores,
        },
        csv_data=csv_bytes(["layer", "head", "copying_score"], rows),
    )

"""The W^O tab: swap the learned output projection for another and compare (a what-if)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis import contribution_norms, output_change
from mha_viz.figures import matrix_heatmap, token_bars
from mha_viz.ui.cache import get_identity_check
from mha_viz.ui.common import csv_bytes, downloads, head_names, plot
from mha_viz.ui.context import Ctx, valid_choice

WO_MODES = {
    "identity": "identity (plain concat)",
    "random": "random orthogonal",
    "ablate": "ablate heads",
    "scale": "scale a head",
}  # each compared with the learned W^O


def _wo_edits(h: int) -> dict:
    """The W^O variant the user picked, as Config fields (compared with the learned W^O)."""
    mode = st.radio(
        "W^O", list(WO_MODES), format_func=WO_MODES.get, key="wo_mode", bind="query-params", horizontal=True
    )
    if mode == "identity":
        return {"wo": "identity"}
    if mode == "random":
        return {"wo": "random", "wo_seed": int(st.number_input("Seed", 0, 2**31 - 1, 0, key="wo_seed"))}
    if mode == "ablate":
        chosen = st.multiselect(
            "Heads to ablate (their W^O block is zeroed)",
            list(range(h)),
            default=[0],
            key="ablate",
            format_func=lambda i: f"head {i}",
        )
        return {"ablate": tuple(int(i) for i in chosen)}
    c1, c2 = st.columns(2)
    valid_choice("scale_head", list(range(h)), 0)
    head = c1.selectbox("Head", list(range(h)), key="scale_head", format_func=lambda i: f"head {i}")
    factor = c2.slider("Factor", 0.0, 3.0, 2.0, 0.1, key="scale_factor")
    return {"head_scale": ((int(head), float(factor)),)}


def wo_view(ctx: Ctx) -> None:
    base = ctx.trace()
    h = base.n_heads
    st.markdown(
        "W^O (d_model × d_model) fuses the concatenated heads: plain concatenation would treat every head alike; "
        "the learned W^O decides how much of each head goes where. Swap it and compare with the learned one."
    )
    edits = _wo_edits(h)
    t = ctx.trace(**edits)
    labels = t.tokens
    change = output_change(base.output.numpy(), t.output.numpy())
    fig = token_bars(
        labels,
        {"relative change |Δ| / |output|": change["relative"], "cosine to original": change["cosine"]},
        "Output change per token (this layer's attention output, before residual and LayerNorm)",
    )
    plot(fig, "wo_change", ctx.c.image_format)
    norms = contribution_norms(t.z.numpy(), t.W_O.numpy())  # [h, n]
    plot(
        matrix_heatmap(
            norms,
            labels,
            head_names(h),
            "Each head's contribution after W^O: ‖z_h · W^O_h‖ per token",
            value_name="norm",
        ),
        "wo_norms",
        ctx.c.image_format,
    )
    rows = [[labels[i], f"{change['relative'][i]:.6g}", f"{change['cosine'][i]:.6g}"] for i in range(len(labels))]
    downloads(
        "wo",
        npz={
            "tokens": np.asarray(labels, dtype=str),
            "head_out_norm": norms.astype(np.float32),
            "output": t.output.numpy(),
            "original_output": base.output.numpy(),
        },
        csv_data=csv_bytes(["token", "relative_change", "cosine"], rows),
    )
    b = ctx.base
    if b.n_kv_heads != b.n_heads or h * t.q.shape[-1] != t.x.shape[1] or not b.plain:
        st.caption(
            "The one-head check needs a layer whose projections are plain linear maps of X that can be re-split "
            "into one head (no grouped K/V, no rotary embeddings or QK-norm)."
        )
        return
    diff = get_identity_check(ctx.config, ctx.c.text, ctx.target, ctx.part, ctx.layer)
    st.metric(
        "1 head and W^O = identity vs plain single-head self-attention: max |difference|",
        f"{diff:.2e}",
        help="Computed live on this layer's own projections: MultiHead with h = 1 and W^O = I against "
        "softmax(X W_Q (X W_K)^T / √d) X W_V. They are the same computation.",
    )

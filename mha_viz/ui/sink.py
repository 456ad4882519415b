"""The attention-sink panel: per head, the share of [CLS]/[SEP] (or a decoder's first token) by weight and by
contribution, so a head that parks its weight on a token that moves nothing shows up as such."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis import norms
from mha_viz.figures import paired_bars
from mha_viz.trace import AttentionTrace
from mha_viz.ui.common import csv_bytes, head_names, plot
from mha_viz.ui.context import Ctx


def sink_panel(ctx: Ctx, trace: AttentionTrace) -> None:
    sink = np.asarray(ctx.key_hidden, dtype=bool)
    if not sink.any():
        return
    names = [lab for lab, s in zip(trace.key_tokens, sink, strict=True) if s]
    shares = norms.sink_shares(trace.pattern.numpy(), norms.contributions(trace), sink)
    title = f"Share going to {', '.join(dict.fromkeys(names))} per head: by weight and by contribution"
    fig = paired_bars(head_names(trace.n_heads), shares["weight"], shares["contribution"],
                      ("weight α", "contribution ‖α·v·W_O‖"), title)  # fmt: skip
    plot(fig, "sink_shares", ctx.image_format)
    st.caption(
        "Mean over query rows of the share each head sends to these tokens. Weight: Σ α over them. Contribution: the "
        "same share of ‖α_ij · v_j W_O^h‖, the length of what they actually send (Kobayashi et al. 2020). A tall "
        "weight bar over a short contribution bar is a head that “looks at” the token but moves almost nothing."
    )
    w, c = shares["weight"], shares["contribution"]
    rows = [[f"head {i}", f"{w[i]:.6g}", f"{c[i]:.6g}"] for i in range(trace.n_heads)]
    st.download_button("Download sink shares (.csv)", csv_bytes(["head", "weight_share", "contribution_share"], rows),
                       file_name="mha-viz-sink-shares.csv", mime="text/csv", key="dl-csv-sink")  # fmt: skip

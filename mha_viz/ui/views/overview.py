"""The Overview tab: every layer × head at a glance; a click opens that head in the Heads tab."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.figures import overview
from mha_viz.figures.common import plural
from mha_viz.ui.common import downloads, plot, shown
from mha_viz.ui.context import Ctx, clicked_points, open_head


def _on_tile_click() -> None:
    for _, custom in clicked_points("overview_fig"):  # customdata (layer, head)
        if len(custom) == 2:
            open_head(int(custom[0]), int(custom[1]))
            return


def overview_view(ctx: Ctx) -> None:
    patterns = ctx.patterns(follow_measure=True)  # [L, H, n_q, n_k]
    ctx.measure_note()
    L, H, n, nk = patterns.shape
    b = ctx.base
    sh = shown(patterns.reshape(L * H, n, nk), b.tokens.labels, ctx.hidden, ctx.c.hide_special,
               b.key_tokens.labels, ctx.key_hidden)  # fmt: skip
    m, mk = len(sh.labels), len(sh.key_labels)
    st.caption(
        f"{ctx.base.model_name}: every layer (rows) × head (columns), {plural(m, 'token')} each. Click a tile to "
        "open that head in the Heads view."
    )
    if sh.note:
        st.info(sh.note)
    group = max(1, b.n_heads // max(1, b.n_kv_heads))
    if group > 1:
        st.caption(f"Grouped-query attention: columns labelled kv0, kv1, … share one key/value head ({group} each).")
    fig = overview(sh.pattern.reshape(L, H, m, mk), group=group)
    plot(fig, "overview_fig", ctx.c.image_format, on_select=_on_tile_click)
    downloads(
        "overview",
        npz={
            "tokens": np.asarray(sh.labels, dtype=str),
            "key_tokens": np.asarray(sh.key_labels, dtype=str),
            "pattern": sh.pattern.reshape(L, H, m, mk),
        },
    )

"""The Head roles tab: per-head scores and a label for each head (previous token, broad, ...)."""

from __future__ import annotations

import streamlit as st

from mha_viz.analysis import ROLE_RULES
from mha_viz.ui.cache import get_roles
from mha_viz.ui.common import csv_bytes, downloads
from mha_viz.ui.context import Ctx, needs_pretrained

ROLE_COLUMNS = ("layer", "head", "label", "prev", "next", "self", "special", "punct", "entropy")


def roles_view(ctx: Ctx) -> None:
    if needs_pretrained(ctx):
        return
    rows = get_roles(ctx.config, ctx.c.text, ctx.target, ctx.part)
    st.markdown(
        "Scores per head (Clark et al. 2019, Voita et al. 2019), averaged over the query tokens: **prev** / "
        "**next** / **self** = weight on the previous / next / same token; **special** / **punct** = total weight "
        "on special tokens / punctuation-only tokens; **entropy** = row entropy in nats (high = broad)."
    )
    st.caption(f"Labels: {ROLE_RULES}.")
    table = {c: [r[c] for r in rows] for c in ROLE_COLUMNS}
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        height=420,
        column_config={c: st.column_config.NumberColumn(format="%.3f") for c in ROLE_COLUMNS[3:]},
        key="roles_table",
    )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["label"]] = counts.get(r["label"], 0) + 1
    st.caption("Heads per label: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    body = [[r[c] if isinstance(r[c], str | int) else f"{r[c]:.6g}" for c in ROLE_COLUMNS] for r in rows]
    downloads("roles", csv_data=csv_bytes(ROLE_COLUMNS, body))

"""The Head roles tab: a layer × head map coloured by each head's role label (a click opens the head),
and the per-head scores behind the labels (previous token, induction, first-token sink, broad, ...)."""

from __future__ import annotations

import streamlit as st

from mha_viz.analysis.plans.roles import ROLE_COLUMNS, roles_plan
from mha_viz.analysis.roles import ROLE_RULES
from mha_viz.figures import roles_map
from mha_viz.ui.cache_studies import get_roles
from mha_viz.ui.choices import clicked_points
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.opened import open_head


def _on_cell_click() -> None:
    for _, custom in clicked_points("roles_map"):  # customdata (layer, head, scores...)
        if len(custom) >= 2:
            open_head(int(custom[0]), int(custom[1]))
            return


def roles_view(ctx: Ctx) -> None:
    rows = get_roles(ctx.sel)
    st.markdown(
        "Scores per head (Clark et al. 2019, Voita et al. 2019, Olsson et al. 2022), over the query tokens. "
        "**first** = weight on position 0, where most heads park much of their attention (the sink); the other "
        "scores are shares of what is left without it: **prev** / **next** / **self** = previous / next / same "
        "token; **dup** = earlier copies of the same token; **induction** = the token right after an earlier "
        "copy; **special** / **punct** = special / punctuation-only tokens; **spread** = how evenly the rest is "
        "spread (1 = uniform); **entropy** = row entropy in nats. Which queries and keys each score counts, "
        "exactly (enough to recompute every number): “Rules”. Click a cell to open that head."
    )
    with st.expander("Rules: every score and label, exactly"):
        st.caption(f"{ROLE_RULES}.")
    plan = roles_plan(rows, ctx.base.model_name)
    plot(roles_map(plan.labels, plan.scores, plan.title), "roles_map", ctx.image_format, on_select=_on_cell_click)
    st.caption(plan.counts)
    st.dataframe(
        plan.table,
        hide_index=True,
        width="stretch",
        height=420,
        column_config={c: st.column_config.NumberColumn(format="%.3f") for c in ROLE_COLUMNS[3:]},
        key="roles_table",
    )
    downloads("roles", csv_data=csv_bytes(ROLE_COLUMNS, plan.rows))

"""The Where does it look? tab: one query token's weight on one key token in every layer × head; a click on the
map (or a top head's pill) opens that head right here, its Open button in the Heads tab."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.norms import shown_pattern
from mha_viz.analysis.plans import where as plan
from mha_viz.config import WINDOW_FROM, WINDOW_ROWS
from mha_viz.figures import matrix_heatmap
from mha_viz.ui.cache_rows import get_focus_weights
from mha_viz.ui.choices import forget, map_click, valid_choice
from mha_viz.ui.common import csv_bytes, downloads, layer_head_map, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.links import url_value
from mha_viz.ui.opened import open_head, set_linked, why_link
from mha_viz.ui.sidebar import plain
from mha_viz.ui.window import row_window

WHERE_FROM, WHERE_ROWS = 2 * WINDOW_FROM, 2 * WINDOW_ROWS  # one head, full width: twice the rows of Heads' windows

SHOWN = ("where_layer", "where_head")
PLACE = "_where_place"  # session_state: the (model, part) the query and key were chosen for


def _show_head(layer: int, head: int) -> None:
    set_linked(where_layer=layer, where_head=head)


_on_map_click = map_click("where_map", _show_head)


def _forget_shown() -> None:
    """A new query or key: show its top head again (the one clicked before belonged to the old pair)."""
    forget(SHOWN)


def _chosen(key: str, options: list[int], default: int) -> int:
    """The value a picker drawn below will show: its stored value, else the link's (still only in the URL on the
    first run: valid_choice has checked it), else ``default``."""
    return plan.chosen(st.session_state.get(key), url_value(key), options, default)


def _new_place(ctx: Ctx) -> None:
    """Another model or part (a decoder's self-attention after its cross-attention): its own default query and
    key, never the pair chosen for the other one (a pair the causal mask hides there would open on a map of 0s)."""
    place = (ctx.base.model_name, ctx.part)
    if st.session_state.get(PLACE, place) != place:
        forget(("where_q", "where_k", *SHOWN))
    st.session_state[PLACE] = place


def where_view(ctx: Ctx) -> None:
    ctx.hiding_not_applied("the weights ranked are the model's own, over every token.")
    labels, key_labels = list(ctx.base.tokens.labels), list(ctx.base.key_tokens.labels)
    causal = plan.causal_here(ctx.base.causal, ctx.config.causal, ctx.part)  # key j visible from query i iff j <= i
    q0, k0, note = plan.default_query_key(labels, key_labels, causal)
    _new_place(ctx)
    c1, c2 = st.columns(2)
    valid_choice("where_q", labels, labels[q0])
    valid_choice("where_k", key_labels, key_labels[k0])
    q_label = c1.selectbox("Query token", labels, key="where_q", bind="query-params", on_change=_forget_shown)
    k_label = c2.selectbox("Key token", key_labels, key="where_k", bind="query-params", on_change=_forget_shown)
    q, k = labels.index(q_label), key_labels.index(k_label)
    if note and (q, k) == (q0, k0):
        st.caption(plain(note))
    weights = get_focus_weights(ctx.sel, q, k, ctx.measure)  # [L, H] p[:,:,q,k]
    p = plan.where_plan(weights, labels, key_labels, q, k, causal)
    if p.warning:
        st.warning(plain(p.warning))
    ctx.measure_note()
    L, H = weights.shape
    valid_choice("where_layer", list(range(L)), p.top[0])
    valid_choice("where_head", list(range(H)), p.top[1])
    if not p.drawn:  # no map of 0s (its colour scale would be made up) and no ranking of ties: the warning
        _shown_head(ctx, weights, q, k)
        return
    layer_head_map(weights, p.title, ctx.value_name, "where_map", ctx.image_format, on_select=_on_map_click)
    ranked = list(p.ranked)
    shown = (_chosen("where_layer", list(range(L)), p.top[0]), _chosen("where_head", list(range(H)), p.top[1]))
    st.session_state["where_top"] = p.lit(shown)  # the pill of the shown head is lit (none: not among the ten)
    st.markdown("**Top heads** (rank, layer, head, weight): pick one to show it below.")
    st.pills(
        "Top heads", list(range(len(ranked))), key="where_top", label_visibility="collapsed", on_change=_pick_top,
        args=(ranked,), format_func=lambda r: f"{r + 1}. layer {ranked[r][0]}, head {ranked[r][1]}: {ranked[r][2]:.3f}",
    )  # fmt: skip
    _shown_head(ctx, weights, q, k)
    downloads(
        "where", csv_data=csv_bytes(["layer", "head", ctx.value_name.replace(" ", "_")], plan.where_rows(weights))
    )


def _pick_top(ranked: list[tuple[int, int, float]]) -> None:
    """A top head's pill: show that head below (a second click on the lit pill keeps it shown)."""
    r = st.session_state.get("where_top")
    if r is not None:
        _show_head(*ranked[r][:2])


def _shown_head(ctx: Ctx, weights: np.ndarray, q: int, k: int) -> None:
    """The opened head's whole pattern (the top head until a cell or a top head's pill picks another), with a
    button that opens it in the Heads tab; beyond WHERE_FROM tokens a window of its query rows.

    Shapes: weights [L, H] (query q on key k)."""
    L, H = weights.shape
    labels, key_labels = ctx.base.tokens.labels, ctx.base.key_tokens.labels
    n, nk = len(labels), len(key_labels)
    a, b, c, d = st.columns([2, 2, 1, 1], vertical_alignment="bottom")
    la = int(a.selectbox("Shown layer", list(range(L)), key="where_layer", bind="query-params"))
    he = int(b.selectbox("Shown head", list(range(H)), key="where_head", bind="query-params"))
    c.button("Open in Heads", key="where_open", on_click=open_head, args=(la, he), help="the Heads tab on this head")
    why_link(d, "where_why", la, he, labels[q], key_labels[k])
    p = shown_pattern(ctx.trace(la, x=False), ctx.measure)[he]  # [n_q, n_k]
    rows = row_window(n, WHERE_ROWS, "where_rows", "the shown head", q) if n > WHERE_FROM else slice(0, n)
    title = plan.head_title((la, he), (labels[q], key_labels[k]), float(p[q, k]), rows, (n, nk))
    fig = matrix_heatmap(p[rows], key_labels, labels[rows], title, value_name=ctx.value_name, attention=True)
    plot(fig, "where_head_map", ctx.image_format)

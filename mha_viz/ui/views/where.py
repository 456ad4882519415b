"""The Where does it look? tab: one query token's weight on one key token in every layer × head; a click on the
map (or a top head's pill) opens that head right here, its Open button in the Heads tab."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.norms import shown_pattern
from mha_viz.analysis.referents import default_pair, focus_head, rank_heads
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


def default_query_key(labels: list[str], key_labels: list[str], causal: bool) -> tuple[int, int, str]:
    """The (query, key) the view opens on: "it" → "animal" (referents.default_pair) for self-attention, else "it"
    (or, under a causal mask, the last token, which sees every key) and "animal" (else the last key). Under a causal
    mask the key is one the query sees (at or before it): else the query becomes the last token, and the note
    (else "") says so."""
    pair = default_pair(labels) if labels == key_labels else None
    last = len(labels) - 1
    q0, k0 = pair if pair else (labels.index("it") if "it" in labels else (last if causal else 0), None)
    k0 = k0 if k0 is not None else (key_labels.index("animal") if "animal" in key_labels else len(key_labels) - 1)
    note = ""
    if causal and (k0 > q0 or (pair is None and "it" not in labels)):
        q0 = last if k0 <= last else q0
        k0 = min(k0, q0)
        note = (
            f"Under the causal mask a token sees only itself and the tokens before it: opened on “{labels[q0]}” "
            f"(token {q0}) → “{key_labels[k0]}” (token {k0}), a key this query can see."
        )
    return q0, k0, note


def _chosen(key: str, options: list[int], default: int) -> int:
    """The value a picker drawn below will show: its stored value, else the link's (still only in the URL on the
    first run: valid_choice has checked it), else ``default``."""
    value = st.session_state.get(key)
    if value in options:
        return value
    link = url_value(key)
    return options[[str(o) for o in options].index(link)] if link in [str(o) for o in options] else default


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
    causal = (ctx.base.causal or ctx.config.causal) and ctx.part != "cross"  # key j visible from query i iff j <= i
    q0, k0, note = default_query_key(labels, key_labels, causal)
    _new_place(ctx)
    c1, c2 = st.columns(2)
    valid_choice("where_q", labels, labels[q0])
    valid_choice("where_k", key_labels, key_labels[k0])
    q_label = c1.selectbox("Query token", labels, key="where_q", bind="query-params", on_change=_forget_shown)
    k_label = c2.selectbox("Key token", key_labels, key="where_k", bind="query-params", on_change=_forget_shown)
    q, k = labels.index(q_label), key_labels.index(k_label)
    if note and (q, k) == (q0, k0):
        st.caption(plain(note))
    measure = ctx.measure
    weights = get_focus_weights(ctx.config, ctx.c.text, ctx.target, ctx.part, q, k, measure)  # [L, H] = p[:, :, q, k]
    if causal and k > q:
        st.warning(
            plain(
                f"The causal mask hides “{key_labels[k]}” (token {k}) from “{labels[q]}” (token {q}): a token sees "
                "only itself and the tokens before it, so every head's weight here is 0. Pick a key at or before "
                "the query, or a later query."
            )
        )
    elif not np.any(weights):
        st.warning(
            plain(f"The model's mask hides “{key_labels[k]}” from “{labels[q]}” in every layer: every weight is 0.")
        )
    ctx.measure_note()
    L, H = weights.shape
    top = focus_head(weights[:, :, None, None], 0, 0)[:2]
    valid_choice("where_layer", list(range(L)), top[0])
    valid_choice("where_head", list(range(H)), top[1])
    if not np.any(weights):  # no map of 0s (its colour scale would be made up) and no ranking of ties: the warning
        _shown_head(ctx, weights, q, k)
        return
    title = f"“{labels[q]}” → “{key_labels[k]}”: weight in every layer × head (click a cell to open it below)"
    layer_head_map(weights, title, ctx.value_name, "where_map", ctx.c.image_format, on_select=_on_map_click)
    ranked = rank_heads(weights)  # the ten largest weights (non-negative: |w| = w), ties to the lower layer and head
    shown = (_chosen("where_layer", list(range(L)), top[0]), _chosen("where_head", list(range(H)), top[1]))
    # the pill of the shown head is the one lit (none when the head shown is not among the ten)
    st.session_state["where_top"] = next((r for r, (la, he, _) in enumerate(ranked) if (la, he) == shown), None)
    st.markdown("**Top heads** (rank, layer, head, weight): pick one to show it below.")
    st.pills(
        "Top heads", list(range(len(ranked))), key="where_top", label_visibility="collapsed", on_change=_pick_top,
        args=(ranked,), format_func=lambda r: f"{r + 1}. layer {ranked[r][0]}, head {ranked[r][1]}: {ranked[r][2]:.3f}",
    )  # fmt: skip
    _shown_head(ctx, weights, q, k)
    rows = [[la, he, f"{weights[la, he]:.6g}"] for la in range(L) for he in range(H)]
    downloads("where", csv_data=csv_bytes(["layer", "head", ctx.value_name.replace(" ", "_")], rows))


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
    w = float(p[q, k])
    rows = row_window(n, WHERE_ROWS, "where_rows", "the shown head", q) if n > WHERE_FROM else slice(0, n)
    what = f"[{n} × {nk}]" if rows.stop - rows.start == n else f"rows {rows.start}–{rows.stop - 1} of [{n} × {nk}]"
    title = f"Layer {la}, head {he}: attention weights {what}; “{labels[q]}” → “{key_labels[k]}” = {w:.3f}"
    fig = matrix_heatmap(p[rows], key_labels, labels[rows], title, value_name=ctx.value_name, attention=True)
    plot(fig, "where_head_map", ctx.c.image_format)

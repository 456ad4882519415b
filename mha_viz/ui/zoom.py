"""The zoom at length (issue 38 §3): the opened head's pooled exact map with the zoom outlined, two ranges (queries,
keys) or a box drawn on the map choosing the window, its exact weights with token labels, and where it sits in the
text. The window follows the focus token: another focus (or head, or layer) moves it to the window around it
(analysis/plans/long_views.default_zoom); the ranges and the box then move it anywhere."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import streamlit as st

from mha_viz.analysis.plans import long_views as plan
from mha_viz.figures.zoom import pooled_map
from mha_viz.ui.common import cached_figure, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.links import plain
from mha_viz.ui.zoom_data import get_layer_pooled, get_offsets, get_window

ROWS, KEYS, ANCHOR, MAP = "zoom_rows", "zoom_keys", "zoom_anchor", "zoom_map"


def _anchor(ctx: Ctx, head: int, focus: int) -> tuple:
    text = hashlib.blake2b(ctx.text.encode(), digest_size=8).hexdigest()
    return ctx.config.model_name, text, ctx.part, ctx.layer, head, focus


def _set(z: plan.Zoom) -> None:
    st.session_state[ROWS] = (z.q0, z.q1 - 1)
    st.session_state[KEYS] = (z.k0, z.k1 - 1)


def _valid(key: str, n: int) -> bool:
    v = st.session_state.get(key)
    return isinstance(v, tuple | list) and len(v) == 2 and all(isinstance(x, int) and 0 <= x < n for x in v)


def _on_box(n_q: int, n_k: int) -> None:
    """A box drawn on the map: the window it covers (at most MAX_ZOOM_SIDE a side, kept from its first position)."""
    sel = getattr(st.session_state.get(MAP), "selection", None)
    boxes = list(getattr(sel, "box", None) or [])
    xs: list[float] = []
    ys: list[float] = []
    for b in boxes:
        xs += [float(v) for v in b.get("x", [])]
        ys += [float(v) for v in b.get("y", [])]
    if not xs or not ys:  # no box: the markers it caught, if any
        points = list(getattr(sel, "points", None) or [])
        xs, ys = [float(p["x"]) for p in points if "x" in p], [float(p["y"]) for p in points if "y" in p]
    if xs and ys:
        z = plan.zoom_from_box(n_q, n_k, xs, ys)
        _set(z)
        st.session_state["zoom_cut"] = plan.was_cut(xs, ys, z)


def current_zoom(ctx: Ctx, head: int, focus: int) -> plan.Zoom:
    """The zoom window of this run: around the focus token when it (or the head, layer, text) changed, else the
    ranges' (a box drawn sets them)."""
    n_q, n_k = len(ctx.base.tokens.labels), len(ctx.base.key_tokens.labels)
    anchor = _anchor(ctx, head, focus)
    if st.session_state.get(ANCHOR) != anchor or not (_valid(ROWS, n_q) and _valid(KEYS, n_k)):
        _set(plan.default_zoom(n_q, n_k, focus, causal=ctx.base.causal and ctx.part != "cross"))
        st.session_state[ANCHOR] = anchor
        st.session_state.pop("zoom_cut", None)
    rows, keys = st.session_state[ROWS], st.session_state[KEYS]
    return plan.zoom_from_ranges(n_q, n_k, rows, keys)


def zoom_panel(ctx: Ctx, head: int, focus: int) -> plan.Zoom:
    """The opened head's pooled map, the zoom's ranges and its exact weights (see the module's docstring)."""
    b = ctx.base
    labels, key_labels = b.tokens.labels, b.key_tokens.labels
    n_q, n_k = len(labels), len(key_labels)
    z = current_zoom(ctx, head, focus)
    f = plan.map_side(n_q, n_k)
    tiles = get_layer_pooled(ctx.sel, f, (head, head + 1), ctx.measure)[0]
    title = f"{ctx.where.capitalize()}, head {head}: {plan.tile_caption(f, ctx.value_name)} (red box: the zoom)"
    fig = pooled_map(tiles, f, n_q, n_k, title, (z.q0, z.q1, z.k0, z.k1), ctx.value_name)
    st.caption(
        f"{n_q:,} tokens: the opened head as a pooled exact map ({plan.tile_caption(f, ctx.value_name)}, computed "
        "from the model's own q, k and each row's softmax statistics). Draw a box on it (box select), or set the "
        f"ranges below, to zoom into at most {plan.MAX_ZOOM_SIDE} × {plan.MAX_ZOOM_SIDE} exact weights; a new focus "
        "token moves the zoom to the window around it."
    )
    plot(fig, MAP, ctx.image_format, on_select=lambda: _on_box(n_q, n_k), selection_mode="box")
    left, right = st.columns(2)
    left.slider("Zoom: query rows (first, last)", 0, n_q - 1, key=ROWS)
    right.slider("Zoom: key columns (first, last)", 0, n_k - 1, key=KEYS)
    z = plan.zoom_from_ranges(n_q, n_k, st.session_state[ROWS], st.session_state[KEYS])
    asked = [st.session_state[ROWS][1] - st.session_state[ROWS][0] + 1, st.session_state[KEYS][1] -
             st.session_state[KEYS][0] + 1]  # fmt: skip
    if st.session_state.pop("zoom_cut", False) or max(asked) > plan.MAX_ZOOM_SIDE:
        st.caption(f"A zoom shows at most {plan.MAX_ZOOM_SIDE} queries × {plan.MAX_ZOOM_SIDE} keys (each labelled): "
                   "the window starts where you chose and is cut there.")  # fmt: skip
    w = get_window(ctx.sel, (z.q0, z.q1), (z.k0, z.k1), ctx.measure)[head]
    title = plan.zoom_title(ctx.where.capitalize(), head, z, ctx.value_name)
    xs, ys = plan.short_labels(key_labels[z.keys]), plan.short_labels(labels[z.rows])  # "␣×19", not 19 marks
    fig = cached_figure("matrix_heatmap", w, tuple(xs), tuple(ys), title, value_name=ctx.value_name, attention=True,
                        width=900)  # fmt: skip
    plot(fig, "zoom_window", ctx.image_format)
    offsets = None if ctx.part == "cross" else get_offsets(ctx.config, ctx.text, tuple(b.tokens.ids))
    where_panel(z, b.tokens.pieces, b.key_tokens.pieces if ctx.part == "cross" else None, (ctx.text, offsets))
    return z


def where_panel(
    z: plan.Zoom, pieces: Sequence[str], key_pieces: Sequence[str] | None = None,
    typed: tuple[str, Sequence[tuple[int, int]] | None] = ("", None),
) -> None:  # fmt: skip
    """The text panel: where the zoom sits (positions, and its tokens in bold in their context; the text's markdown
    characters escaped). ``typed``: the text and its tokens' character offsets, so that the panel shows the text as
    typed (word pieces joined); without offsets, the tokens' pieces joined by spaces."""
    text, offsets = typed

    def part(lo: int, hi: int, own: Sequence[str]) -> tuple[str, str, str]:
        if offsets is not None and own is pieces:
            return plan.text_excerpt(text, offsets, lo, hi)
        return plan.excerpt(own, lo, hi)

    st.caption(f"Where the zoom sits in the text: {plan.where_words(z)}.")
    before, inside, after = part(z.q0, z.q1, pieces)
    st.markdown(f"Queries: {plain(before)} **⟦{plain(inside)}⟧** {plain(after)}")
    if (z.k0, z.k1) != (z.q0, z.q1) or key_pieces is not None:
        before, inside, after = part(z.k0, z.k1, key_pieces or pieces)
        st.markdown(f"Keys: {plain(before)} **⟦{plain(inside)}⟧** {plain(after)}")

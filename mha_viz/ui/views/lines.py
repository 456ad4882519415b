"""The Lines tab: token-to-token lines for one head or a few (bertviz's head view, drawn with Plotly)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import streamlit as st

from mha_viz.figures import (
    LINE_THRESHOLD,
    MAX_LINE_HEADS,
    MAX_ROWS,
    MAX_SEGMENTS,
    LineSet,
    attention_lines,
    select_lines,
    strongest_head,
    token_window,
)
from mha_viz.ui.choices import clicked_points, valid_choice
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.opened import follow_focus, follow_head, set_linked
from mha_viz.ui.sidebar import check_int, note_ignored, summarize, url_value

ALL = "(all tokens)"  # the focus choice that draws every query's lines
TOP_LINES = 12  # the table beside the figure: this many of the heaviest lines drawn


def _head_label(i: int) -> str:
    return f"head {i}"


def _on_click(labels: Sequence[str]) -> None:
    """A click on a query token (left column) makes it the focus; clicks elsewhere change nothing."""
    for _, custom in clicked_points("lines_fig"):  # customdata: (token index, side, hover lines...)
        if len(custom) >= 2 and custom[1] == "query" and 0 <= int(custom[0]) < len(labels):
            st.session_state["lines_focus"] = labels[int(custom[0])]
            set_linked(focus=labels[int(custom[0])])  # the focus token in every view
            return


def _pick_heads(ctx: Ctx, h: int, default: int) -> list[int]:
    """The heads multiselect (bound to the URL): the opened head (``default``, the strongest "it" → "animal" head
    here, while no head is opened), until heads are picked here; link values that are not heads are reported."""
    options = list(range(h))
    if url_value("lines_heads") is not None:  # the link's heads (checked here: at most MAX_LINE_HEADS are shown)
        given = st.query_params.get_all("lines_heads")
        labels = [_head_label(i) for i in options]
        bad = [v for v in given if v not in labels]
        if bad:
            good = [v for v in given if v in labels][:MAX_LINE_HEADS] or [_head_label(default)]
            why = f"the heads are {summarize(labels)}; showing {', '.join(good)}"
            note_ignored("lines_heads", ", ".join(bad), why, drop=False)  # Streamlit drops them from the link
    took = follow_head(ctx, "lines_heads", h, many=True, default=default)
    chosen = st.multiselect(
        f"Heads (one colour each, at most {MAX_LINE_HEADS})",
        options,
        format_func=_head_label,
        max_selections=MAX_LINE_HEADS,
        key="lines_heads",
        bind="query-params",
        on_change=took,
    )
    return [int(i) for i in chosen]


def _windows(
    pattern: np.ndarray, heads: list[int], focus: int | None, self_attention: bool
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Which MAX_ROWS tokens per column a long text shows: around the focus, else from a chosen start."""
    nq, nk = int(pattern.shape[1]), int(pattern.shape[2])
    if focus is not None:
        qw = token_window(nq, focus)
    elif nq > MAX_ROWS:
        hi = nq - MAX_ROWS
        bind = check_int("lines_start", 0, hi, 0)  # None: the link's value is ignored, Streamlit must not read it
        start = st.number_input(
            f"{nq} tokens: the first query token shown (a window of {MAX_ROWS}; or pick a focus token)",
            0,
            hi,
            0,
            step=MAX_ROWS // 2,
            key="lines_start",
            bind=bind,
        )
        qw = (int(start), int(start) + MAX_ROWS)
    else:
        qw = (0, nq)
    if self_attention and nk == nq:  # the same tokens on both sides: the same window
        return qw, qw
    weight_in = pattern[heads, qw[0] : qw[1]].sum((0, 1))  # [n_k]: weight each source token receives
    return qw, token_window(nk, int(np.argmax(weight_in)))


def lines_view(ctx: Ctx) -> None:
    t = ctx.trace(x=False)
    sh = ctx.shown(t, follow_measure=True)
    ctx.measure_note()
    h = sh.pattern.shape[0]
    cross = t.part == "cross"
    sides = "decoder tokens left, source tokens right" if cross else "query tokens left, key tokens right"
    st.caption(
        f"{ctx.base.model_name}, {ctx.where}: {sides}. Each line joins a query to a key it attends to; its "
        f"opacity grows with the weight in 8 steps (0–0.125 faintest … 0.875–1 solid). Weights under "
        f"{LINE_THRESHOLD:g} are not drawn, nor more than {MAX_SEGMENTS:,} lines (the largest are kept), and a "
        f"text longer than {MAX_ROWS} tokens is shown as a window of {MAX_ROWS}. Hover a token for its "
        "three largest weights in each head; click a query token on the left (or pick it below) to draw only "
        "its lines."
    )
    if sh.note:
        st.info(sh.note)
    c1, c2 = st.columns([2, 1])
    with c1:
        heads = _pick_heads(ctx, h, strongest_head(sh.pattern, sh.labels, sh.key_labels))
    options = [ALL, *sh.labels]
    took = follow_focus("lines_focus", list(sh.labels))  # a focus token chosen in another view
    valid_choice("lines_focus", options, ALL)
    focus_label = c2.selectbox("Focus token (query)", options, key="lines_focus", bind="query-params", on_change=took)
    if not heads:
        st.info("Pick at least one head above to draw its lines.")
        return
    focus = None if focus_label == ALL else list(sh.labels).index(focus_label)
    windows = _windows(sh.pattern, heads, focus, not cross)
    lines = select_lines(sh.pattern, heads, focus, windows)
    names = ", ".join(_head_label(i) for i in heads)
    about = f"“{focus_label}” as the query" if focus is not None else "every query"
    title = f"{ctx.where.capitalize()}, {names}: {about}"
    left, right = st.columns([3, 2])
    with left:
        fig = attention_lines(sh.pattern, sh.labels, sh.key_labels, lines, title)
        plot(fig, "lines_fig", ctx.c.image_format, on_select=lambda: _on_click(sh.labels))
    with right:  # beside the lines, their numbers: the strongest ones drawn
        _strongest(lines, sh.labels, sh.key_labels, ctx.value_name)
    downloads("lines", csv_data=lines_csv(lines, sh.labels, sh.key_labels, ctx.value_name.replace(" ", "_")))


def _strongest(lines: LineSet, labels: Sequence[str], key_labels: Sequence[str], value: str) -> None:
    """The TOP_LINES heaviest lines drawn, as a table (query, key, head, weight), heaviest first."""
    order = np.argsort(-lines.weight, kind="stable")[:TOP_LINES]
    if not order.size:
        return
    st.markdown(f"**The {len(order)} strongest lines drawn**")
    st.dataframe(
        {
            "query": [labels[int(lines.query[j])] for j in order],
            "key": [key_labels[int(lines.key[j])] for j in order],
            "head": [int(lines.head[j]) for j in order],
            value: [round(float(lines.weight[j]), 3) for j in order],
        },
        hide_index=True,
        width="stretch",
        height=35 * (len(order) + 1) + 3,  # every row shown, no inner scrolling
    )


def lines_csv(lines: LineSet, labels: Sequence[str], key_labels: Sequence[str], value: str = "weight") -> bytes:
    """The drawn weights, one row per line: query, key, head, weight."""
    rows = [
        [labels[q], key_labels[k], int(h), f"{float(w):.9g}"]
        for h, q, k, w in zip(lines.head, lines.query, lines.key, lines.weight, strict=True)
    ]
    return csv_bytes(["query", "key", "head", value], rows)

"""The Lines tab: token-to-token lines for one head or a few (bertviz's head view, drawn with Plotly)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import streamlit as st

from mha_viz.analysis.plans import lines as plan
from mha_viz.analysis.plans.lines import ALL
from mha_viz.figures import (
    LINE_THRESHOLD,
    MAX_LINE_HEADS,
    MAX_ROWS,
    MAX_SEGMENTS,
    LineSet,
    attention_lines,
    select_lines,
)
from mha_viz.ui.choices import clicked_points, valid_choice
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.opened import follow_focus, follow_head, set_linked
from mha_viz.ui.sidebar import check_int, note_ignored, summarize, url_value

TOP_LINES = 12  # the table beside the figure: this many of the heaviest lines drawn


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
        bad, good = plan.link_heads(st.query_params.get_all("lines_heads"), h, default, MAX_LINE_HEADS)
        if bad:
            why = f"the heads are {summarize([plan.head_label(i) for i in options])}; showing {', '.join(good)}"
            note_ignored("lines_heads", ", ".join(bad), why, drop=False)  # Streamlit drops them from the link
    took = follow_head(ctx, "lines_heads", h, many=True, default=default)
    chosen = st.multiselect(
        f"Heads (one colour each, at most {MAX_LINE_HEADS})",
        options,
        format_func=plan.head_label,
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
    nq, start, hi = int(pattern.shape[1]), 0, plan.start_picker(int(pattern.shape[1]), focus, MAX_ROWS)
    if hi is not None:
        bind = check_int("lines_start", 0, hi, 0)  # None: the link's value is ignored, Streamlit must not read it
        label = f"{nq} tokens: the first query token shown (a window of {MAX_ROWS}; or pick a focus token)"
        start = int(st.number_input(label, 0, hi, 0, step=MAX_ROWS // 2, key="lines_start", bind=bind))
    return plan.windows(pattern, heads, focus, start, self_attention, MAX_ROWS)


def lines_view(ctx: Ctx) -> None:
    t = ctx.trace(x=False)
    sh = ctx.shown(t, follow_measure=True)
    ctx.measure_note()
    h = sh.pattern.shape[0]
    cross = t.part == "cross"
    st.caption(plan.lines_caption(ctx.base.model_name, ctx.where, cross, LINE_THRESHOLD, MAX_SEGMENTS, MAX_ROWS))
    if sh.note:
        st.info(sh.note)
    c1, c2 = st.columns([2, 1])
    with c1:
        heads = _pick_heads(ctx, h, plan.opening(sh.pattern, sh.labels, sh.key_labels))
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
    title = plan.lines_title(ctx.where, heads, None if focus is None else focus_label)
    left, right = st.columns([3, 2])
    with left:
        fig = attention_lines(sh.pattern, sh.labels, sh.key_labels, lines, title)
        plot(fig, "lines_fig", ctx.image_format, on_select=lambda: _on_click(sh.labels))
    with right:  # beside the lines, their numbers: the strongest ones drawn
        _strongest(lines, sh.labels, sh.key_labels, ctx.value_name)
    downloads("lines", csv_data=lines_csv(lines, sh.labels, sh.key_labels, ctx.value_name.replace(" ", "_")))


def _strongest(lines: LineSet, labels: Sequence[str], key_labels: Sequence[str], value: str) -> None:
    """The TOP_LINES heaviest lines drawn, as a table (query, key, head, weight), heaviest first."""
    top = plan.strongest(lines, labels, key_labels, value, TOP_LINES)
    if top is None:
        return
    st.markdown(top.title)
    rows = len(top.table["query"])
    st.dataframe(top.table, hide_index=True, width="stretch", height=35 * (rows + 1) + 3)  # every row, no scrolling


def lines_csv(lines: LineSet, labels: Sequence[str], key_labels: Sequence[str], value: str = "weight") -> bytes:
    """The drawn weights, one row per line: query, key, head, weight."""
    return csv_bytes(["query", "key", "head", value], plan.line_rows(lines, labels, key_labels))

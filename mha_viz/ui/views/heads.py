"""The Heads tab: every head of the chosen layer, one opened head and the focus token."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import streamlit as st

from mha_viz.analysis.plans.long_views import is_long
from mha_viz.config import WINDOW_FROM, WINDOW_ROWS
from mha_viz.figures import GRID_MAX_CELLS, matrix_heatmap
from mha_viz.figures.common import plural, pool_blocks
from mha_viz.pipeline.budget import check_grid
from mha_viz.trace import AttentionTrace
from mha_viz.ui.cache import provisional
from mha_viz.ui.cache_rows import get_role_labels
from mha_viz.ui.choices import clicked_points, valid_choice
from mha_viz.ui.common import Shown, cached_figure, csv_bytes, downloads, head_names, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.found import found_head
from mha_viz.ui.heads_long import heads_long_view
from mha_viz.ui.opened import keep_layer, opened_head, set_linked, take_focus, why_link
from mha_viz.ui.sink import sink_panel
from mha_viz.ui.timing import timed_fragment
from mha_viz.ui.window import row_window

POOLED_CELLS = GRID_MAX_CELLS // 2  # a grid that is averaged anyway (over 128 tokens): 64 blocks a side (~4 px each)


def _on_grid_click() -> None:
    for p, custom in clicked_points("heads_grid"):  # customdata (weight, head); y is the query token
        if len(custom) == 2:
            set_linked(head=int(custom[1]), focus=html.unescape(str(p.get("y", ""))))
            return


def heads_view(ctx: Ctx) -> None:
    check_grid(ctx.base.n_heads)
    if not ctx.config.own and is_long(len(ctx.base.tokens.labels), len(ctx.base.key_tokens.labels)):
        return heads_long_view(ctx)  # pooled exact maps and a zoom: never a whole [h, n, n]
    t = ctx.trace(x=False)
    sh = ctx.shown(t, follow_measure=True)
    ctx.measure_note()
    h, n = sh.pattern.shape[0], len(sh.labels)
    keys = (
        ""
        if t.part != "cross"
        else f" (queries: the decoder's {plural(n, 'token')}; keys: the source's {len(sh.key_labels)})"
    )
    st.caption(
        f"{ctx.base.model_name}, {ctx.where}: {plural(h, 'head')}, d_k = {t.q.shape[-1]}, {plural(n, 'token')}{keys}. "
        "Rows are query tokens, columns the key tokens they attend to; each row sums to 1. "
        "Click a cell to open its head below (and make its query the focus token)."
    )
    _model_terms(t)
    _learned_sink(ctx, t, sh.labels)
    if t.group > 1:
        kv = t.n_heads // t.group
        shares = "; ".join(f"K/V {g}: heads {g * t.group}–{(g + 1) * t.group - 1}" for g in range(kv))
        st.caption(f"Grouped-query attention: {plural(kv, 'key/value head')} shared by the {h} query heads ({shares}).")
    if sh.note:
        st.info(sh.note)
    grid, f = pool_blocks(sh.pattern, GRID_MAX_CELLS if max(n, len(sh.key_labels)) <= GRID_MAX_CELLS else POOLED_CELLS)
    if f > 1:  # [h, ≤64, ≤64]: also what the figure cache hashes, not [h, n, n]
        st.caption(
            f"{n} tokens: the grid shows each head averaged over {f}×{f} token blocks (hover says “mean”); "
            "the head opened below shows every weight."
        )
    titles = head_names(h)
    if (
        not ctx.hide_special and t.part != "cross" and not provisional()
    ):  # role labels from this layer's own pattern (thresholds in Head roles); a long text's first view waits
        roles = get_role_labels(ctx.sel, ctx.base.tokens)
        titles = [f"head {i} · {label}" for i, label in enumerate(roles)]
    if t.group > 1:  # heads that share a K/V head carry its number: "head 4 · K/V 1 · ..."
        titles = [tt.replace(f"head {i}", f"head {i} · K/V {i // t.group}", 1) for i, tt in enumerate(titles)]
    cols = t.group if 1 < t.group <= 6 else 4  # one row per K/V group where that fits
    fig = cached_figure(
        "heads_grid", grid, tuple(sh.labels), tuple(titles), cols, True, tuple(sh.key_labels), ctx.value_name, f
    )
    plot(fig, "heads_grid", ctx.image_format, on_select=_on_grid_click)

    _head_and_focus(ctx, sh)
    _sinks(ctx, t)


@st.fragment
@timed_fragment
def _sinks(ctx: Ctx, t: AttentionTrace) -> None:
    """The sink panel, drawn only while its expander is open (a closed expander's figure would be drawn anyway);
    opening it reruns only this fragment."""
    box = st.expander("Attention sinks: weight against contribution, per head", key="sinks_open", on_change="rerun")
    if box.open:
        with box:
            sink_panel(ctx, t)


@st.fragment
@timed_fragment
def _head_and_focus(ctx: Ctx, sh: Shown) -> None:
    """The opened head and the focus token: a fragment, so changing them redraws only this part."""
    h, n = sh.pattern.shape[0], len(sh.labels)
    found = found_head(ctx.sel)
    left, right = st.columns(2)
    valid_choice("head", list(range(h)), opened_head(ctx, h))  # the head opened in any view (or the found one)
    head = int(
        left.selectbox("Open head", list(range(h)), format_func=lambda i: f"head {i}", key="head", bind="query-params",
                       on_change=keep_layer)
    )  # fmt: skip
    default_focus = (
        found.query if found and found.query in sh.labels  # the found head's query ("it", or "it (416)")
        else "it" if "it" in sh.labels else sh.labels[min(1, n - 1)]
    )  # fmt: skip
    valid_choice("focus", list(sh.labels), default_focus)
    focus = right.selectbox("Focus token (query)", list(sh.labels), key="focus", bind="query-params",
                            on_change=take_focus)  # fmt: skip
    q = list(sh.labels).index(focus)
    if found is not None:
        st.caption(found.says(opened=(found.layer, found.head) == (ctx.layer, head)))
    why_link(st, "heads_why", ctx.layer, head, focus, sh.key_labels[int(np.argmax(sh.pattern[head, q]))])  # its top key
    with left:
        what = "attention weights" if ctx.measure == "weight" else "contribution shares"
        rows = row_window(n, WINDOW_ROWS, "head_rows", "the opened head", q) if n > WINDOW_FROM else slice(0, n)
        part = "" if rows.stop - rows.start == n else f"rows {rows.start}–{rows.stop - 1} of "
        title = f"{ctx.where.capitalize()}, head {head}: {what} {part}[{n} × {len(sh.key_labels)}]"
        fig = cached_figure(
            "matrix_heatmap", sh.pattern[head][rows], sh.key_labels, sh.labels[rows], title,
            value_name=ctx.value_name, attention=True,
        )  # fmt: skip
        plot(fig, "head_large", ctx.image_format)
    with right:
        strip = sh.pattern[:, q, :]  # [h, keys]: the focus token's row in every head
        title = f"“{focus}” as the query: its {ctx.value_name}s in every head [{h} × {len(sh.key_labels)}]"
        fig = cached_figure(
            "matrix_heatmap", strip, sh.key_labels, tuple(head_names(h)), title, value_name=ctx.value_name
        )
        plot(fig, "focus_strip", ctx.image_format)
    bars_box = st.expander(f"“{focus}” as the query: bars, head by head", key="bars_open", on_change="rerun")
    if bars_box.open:  # drawn only while open: the strip above shows the same weights as one heatmap
        with bars_box:
            bars = cached_figure("focus_bars", sh.pattern[:, q : q + 1], tuple(sh.key_labels), 0, 4, focus)  # row q
            plot(bars, "focus_bars", ctx.image_format)
    downloads(
        "heads",
        npz={
            "tokens": np.asarray(sh.labels, dtype=str),
            "key_tokens": np.asarray(sh.key_labels, dtype=str),
            "pattern": sh.pattern,
        },
        csv_data=lambda: focus_csv(sh, q, focus),
    )


def focus_csv(sh: Shown, q: int, focus: str) -> bytes:
    """The focus token's row in every head, as the .csv download (built when it is clicked)."""
    rows = [[f"head {i}", *(f"{v:.6g}" for v in sh.pattern[i, q])] for i in range(sh.pattern.shape[0])]
    return csv_bytes([f"{focus} → key", *sh.key_labels], rows)


def _learned_sink(ctx: Ctx, t: AttentionTrace, labels: Sequence[str]) -> None:
    """A layer with learned sinks (gpt-oss): the share of each query's attention that the sink takes, per head,
    as its own figure (the grid's rows then sum to 1 − this share)."""
    share = t.sink_share
    if share is None:
        return
    share = share.numpy()  # [h, q]
    if len(labels) != share.shape[1]:  # special tokens hidden: the rows shown
        return
    st.caption(
        f"Learned attention sinks: each head's softmax also counts a learned logit that goes to no token, so each "
        f"row of the grid sums to 1 − the sink's share (here {share.min():.2f}–{share.max():.2f})."
    )
    fig = matrix_heatmap(share, list(labels), head_names(share.shape[0]), "Sink share per head and query",
                         value_name="sink share", attention=True, zmin=0.0, zmax=1.0, width=900)  # fmt: skip
    plot(fig, "sink_share", ctx.image_format)


def _model_terms(t: AttentionTrace) -> None:
    """Say which terms beyond q·kᵀ·scale the model adds here, and that the weights are the model's own."""
    terms = []
    if t.softcap is not None:
        terms.append(f"logit soft-capping at {t.softcap:g}")
    if t.bias is not None:
        terms.append("an additive position bias")
    if t.causal:
        terms.append("a causal mask")
    if t.sink is not None:
        terms.append(
            "a learned attention sink per head (a logit in each row's softmax that goes to no token; the weights shown "
            "are those applied to V, so a model that reports them before its sink, as granite_swa does, returns "
            "each row ÷ (1 − the sink's share) as output_attentions)"
        )
    extra = f"This layer adds {', '.join(terms)} before the softmax." if terms else ""
    if t.model_delta is not None:
        extra = (
            f"Recomputed from the q, k, v the model used; largest difference from the model's own weights: "
            f"{t.model_delta:.1e}. {extra}"
        )
    if extra:
        st.caption(extra)

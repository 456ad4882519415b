"""The Heads tab at length (issue 38 §3; beyond config.LONG_VIEW_FROM tokens): every head of the layer as a pooled
exact map, the opened head's map with a zoom of exact weights that follows the focus token, and the focus token's
row in every head — never a whole [h, n, n] (mha_viz.pipeline.zoom, from the recorded q, k and row statistics)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.plans import long_views as plan
from mha_viz.figures.common import plural
from mha_viz.figures.zoom import focus_row_map
from mha_viz.pipeline.budget import check_grid
from mha_viz.ui.choices import valid_choice
from mha_viz.ui.common import cached_figure, csv_bytes, downloads, head_names, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.found import found_head
from mha_viz.ui.links import plain
from mha_viz.ui.opened import keep_layer, opened_head, take_focus, why_link
from mha_viz.ui.timing import timed_fragment
from mha_viz.ui.zoom import zoom_panel
from mha_viz.ui.zoom_data import get_focus_row, get_layer_pooled, get_window


def heads_long_view(ctx: Ctx) -> None:
    check_grid(ctx.base.n_heads)
    b = ctx.base
    labels, key_labels = b.tokens.labels, b.key_tokens.labels
    n, n_k, h = len(labels), len(key_labels), b.n_heads
    ctx.measure_note()
    f = plan.grid_side(n, n_k)
    st.caption(
        f"{b.model_name}, {ctx.where}: {plural(h, 'head')}, {plural(n, 'token')}: longer than "
        f"{plan.LONG_VIEW_FROM:,} tokens, so each head is drawn as a pooled exact map "
        f"({plan.tile_caption(f, ctx.value_name)}; the means of the model's own weights, recomputed from its q, k "
        "and each row's softmax statistics). Rows are queries, columns keys. Open a head below to zoom into its "
        "exact weights."
    )
    ctx.hiding_not_applied(f"a text over {plan.LONG_VIEW_FROM:,} tokens is drawn with every token.")
    group = max(1, h // max(1, b.n_kv_heads))
    grid = get_layer_pooled(ctx.sel, f, None, ctx.measure)
    titles = head_names(h)
    if group > 1:
        titles = [f"head {i} · K/V {i // group}" for i in range(h)]
    cols = group if 1 < group <= 6 else 4
    fig = cached_figure("heads_grid", grid, tuple(labels), tuple(titles), cols, False, tuple(key_labels),
                        ctx.value_name, f, cap=True)  # fmt: skip
    plot(fig, "heads_grid", ctx.image_format)
    _opened(ctx)


@st.fragment
@timed_fragment
def _opened(ctx: Ctx) -> None:
    """The opened head, its zoom and the focus token: a fragment, so changing them redraws only this part."""
    b = ctx.base
    labels, key_labels = list(b.tokens.labels), list(b.key_tokens.labels)
    h, n = b.n_heads, len(labels)
    left, right = st.columns(2)
    valid_choice("head", list(range(h)), opened_head(ctx, h))
    head = int(
        left.selectbox("Open head", list(range(h)), format_func=lambda i: f"head {i}", key="head", bind="query-params",
                       on_change=keep_layer)
    )  # fmt: skip
    found = found_head(ctx.sel)
    default_focus = found.query if found and found.query in labels else labels[min(1, n - 1)]
    valid_choice("focus", labels, default_focus)
    focus = right.selectbox("Focus token (query)", labels, key="focus", bind="query-params", on_change=take_focus)
    q = labels.index(focus)
    if found is not None:
        st.caption(found.says(opened=(found.layer, found.head) == (ctx.layer, head)))
    z = zoom_panel(ctx, head, q)
    strip = get_focus_row(ctx.sel, q, ctx.measure)  # [h, n_k]
    why_link(st, "heads_why", ctx.layer, head, focus, key_labels[int(np.argmax(strip[head]))])  # its top key
    _focus_row(ctx, strip, focus, head, key_labels)
    # the download: the zoom's exact weights and the focus row, never [h, n, n]
    zw = get_window(ctx.sel, (z.q0, z.q1), (z.k0, z.k1), ctx.measure)
    downloads(
        "heads",
        npz={
            "query_tokens": np.asarray(labels[z.rows], dtype=str),
            "key_tokens": np.asarray(key_labels[z.keys], dtype=str),
            "zoom": zw,  # [h, rows, keys]
            "zoom_rows": np.asarray([z.q0, z.q1]),
            "zoom_keys": np.asarray([z.k0, z.k1]),
            "focus_row": strip,  # [h, n_k]
        },
        csv_data=lambda: csv_bytes([f"{focus} → key", *key_labels],
                                   [[f"head {i}", *(f"{v:.6g}" for v in strip[i])] for i in range(h)]),
    )  # fmt: skip


def _focus_row(ctx: Ctx, strip: np.ndarray, focus: str, head: int, key_labels: list[str]) -> None:
    """The focus token's exact row in every head, drawn by blocks of keys as wide as the map's tiles (each cell its
    block's largest weight; the hover names that key and its exact weight), and the opened head's top keys named.
    Shapes: strip [h, n_k]."""
    h, n_k = strip.shape
    f = plan.map_side(n_k, n_k)
    top, top_key, sums = plan.row_blocks(strip, f)
    focus = plan.short_label(focus)
    title = (f"“{focus}” as the query: its largest {ctx.value_name} in each block of {f} keys, every head "
             f"[{h} × {n_k:,} exact, {top.shape[1]} blocks]")  # fmt: skip
    names = plan.short_labels(key_labels)
    plot(focus_row_map(top, top_key, sums, f, names, head_names(h), title, ctx.value_name), "focus_strip",
         ctx.image_format)  # fmt: skip
    best = np.argsort(-strip[head], kind="stable")[: plan.TOP_KEYS]
    st.caption(
        f"Head {head}: “{plain(focus)}” gives the most {ctx.value_name} to "
        + ", ".join(f"“{plain(names[k])}” ({strip[head, k]:.3f})" for k in best)
        + f"; these {len(best)} keys hold {strip[head, best].sum():.0%} of its row."
    )

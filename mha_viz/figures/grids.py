"""Many heatmaps at once: every head of a layer (heads_grid), every layer × head (overview)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha_viz.figures.common import (
    CELL_HOVER,
    CLICK_OVERLAY_MAX_CELLS,
    GRID_MAX_CELLS,
    GRID_WIDTH_PX,
    LABEL_PX,
    OVERVIEW_TILE,
    POOLED_HOVER,
    SEQUENTIAL,
    WEIGHT_HOVER,
    _f32,
    _grid,
    block_labels,
    category_ticks,
    plural,
    pool_blocks,
    safe,
)


def heads_grid(
    pattern: np.ndarray,
    tokens: Sequence[str],
    titles: Sequence[str] | None = None,
    cols: int = 4,
    clickable: bool = True,
    key_tokens: Sequence[str] | None = None,
    value_name: str = "weight",
    pooled: int = 0,
) -> go.Figure:
    """One heatmap per head on a shared colour scale (0 to the largest weight shown; ``value_name`` titles it).

    With ``clickable`` and few enough cells, an invisible scatter marker sits on every cell, so a click reports
    (head, query, key) to Streamlit (heatmaps alone send no selection events); the markers then also carry the
    hover text "query → key: weight". Texts longer than
    GRID_MAX_CELLS tokens are shown averaged over token blocks (hover says "mean"); the single-head
    view shows every weight. Shapes: pattern [n_heads, query_pos, key_pos]; tokens [query_pos];
    key_tokens [key_pos] (default: tokens). ``pooled`` f > 0: ``pattern`` is already
    pool_blocks(pattern, m) with block side f, m <= GRID_MAX_CELLS (pooled once by the caller, who keeps the full one).
    """
    h = int(pattern.shape[0])
    keys = tokens if key_tokens is None else key_tokens
    pattern, f = (pattern, pooled) if pooled else pool_blocks(pattern, GRID_MAX_CELLS)
    if f > 1:
        tokens, keys, clickable = block_labels(tokens, f), block_labels(keys, f), False
    n, nk = len(tokens), len(keys)
    titles = list(titles) if titles is not None else [f"head {i}" for i in range(h)]
    rows, cols = _grid(h, cols)
    panel_w = GRID_WIDTH_PX / cols  # about how many pixels each small heatmap gets across
    # tall enough for a legible label per query row (up to 30), but never a sliver: at most twice as tall as wide
    panel_h = int(min(340, 2 * panel_w + 40, max(panel_w, 1.6 * LABEL_PX * min(n, 30), 150)))
    height = panel_h * rows + 60
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[short_title(t, panel_w) for t in titles],  # the whole title is in each cell's hover
        shared_xaxes=True,  # token labels on the outer axes only (hover names every token)
        shared_yaxes=True,
        horizontal_spacing=0.015 if cols <= 4 else 0.008,
        vertical_spacing=min(0.3 / rows, 34 / height) if rows > 1 else 0.0,
    )
    for ann in fig.layout.annotations:
        ann.font = {"size": 12 if cols <= 4 else 10}
    z = _f32(pattern)
    labels, klabels = list(tokens), list(keys)
    # One invisible marker per cell (hovermode "y" with one marker per row was cheaper to draw, but Plotly then
    # names the row marker's key in the heatmap's hover: a wrong cell under the pointer).
    overlay = clickable and h * n * nk <= CLICK_OVERLAY_MAX_CELLS
    qi, ki = np.meshgrid(np.arange(n), np.arange(nk), indexing="ij")
    cell_x = [klabels[k] for k in ki.ravel()]  # key label of every cell, row by row
    cell_y = [labels[q] for q in qi.ravel()]  # query label of every cell
    traces, at_rows, at_cols = [], [], []
    for i in range(h):
        r, c = i // cols + 1, i % cols + 1
        traces.append(
            go.Heatmap(
                z=z[i],
                x=klabels,
                y=labels,
                coloraxis="coloraxis",
                hovertemplate=POOLED_HOVER if f > 1 else WEIGHT_HOVER,
                meta=titles[i],
                hoverinfo="skip" if overlay else None,
                name=titles[i],
            )
        )
        at_rows.append(r)
        at_cols.append(c)
        if overlay:  # customdata per cell: (weight, head), numeric, so it travels as a typed array
            custom = np.stack([z[i].ravel(), np.full(n * nk, i, dtype=np.float32)], axis=1)
            traces.append(
                go.Scatter(
                    x=cell_x,
                    y=cell_y,
                    mode="markers",
                    marker={"size": 12, "opacity": 0},
                    customdata=custom,
                    hovertemplate=CELL_HOVER,
                    showlegend=False,
                    name=f"{titles[i]} cells",
                    meta=titles[i],
                )
            )
            at_rows.append(r)
            at_cols.append(c)
    fig.add_traces(traces, rows=at_rows, cols=at_cols)
    xticks, _ = category_ticks(klabels, 0.85 * panel_w, angle=-90)
    yticks, _ = category_ticks(labels, 0.85 * panel_h)
    plain = {"ticks": "", "showgrid": False, "zeroline": False}  # no marks poking into neighbouring panels
    fig.update_xaxes(**plain, **xticks)
    fig.update_yaxes(**plain, autorange="reversed", **yticks)
    fig.update_layout(
        coloraxis={"colorscale": SEQUENTIAL, "cmin": 0.0, "cmax": float(z.max()) if z.size else 1.0},
        coloraxis_colorbar={"title": {"text": value_name}},
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        hovermode="closest",
        clickmode="event+select",
        dragmode="zoom",
    )
    return safe(fig)


def short_title(title: str, px: float) -> str:
    """A panel title cut to about the width of its panel (``px`` pixels): "head 12 · previous tok…"."""
    most = max(6, int(px / 6.5))
    return title if len(title) <= most else title[: most - 1].rstrip() + "…"


def overview(patterns: np.ndarray, tile: int = OVERVIEW_TILE, gap: int = 2, group: int = 1) -> go.Figure:
    """All layers × heads in one heatmap: one tile per head, rows = layers, columns = heads.

    Tiles larger than ``tile`` tokens are block-averaged down to about ``tile`` cells (the Heads
    view shows them at full resolution). One invisible marker per tile reports clicks as
    customdata (layer, head). Shapes: patterns [n_layers, n_heads, n_query, n_key].
    """
    n_layers, n_heads = patterns.shape[:2]
    small, f = pool_blocks(patterns, tile)  # [L, H, mq, mk]
    mq, mk = small.shape[-2:]
    step_y, step_x = mq + gap, mk + gap
    canvas = np.full((n_layers * step_y - gap, n_heads * step_x - gap), np.nan, dtype=np.float32)
    for layer in range(n_layers):
        for head in range(n_heads):
            canvas[layer * step_y : layer * step_y + mq, head * step_x : head * step_x + mk] = small[layer, head]
    centres_x = [h * step_x + (mk - 1) / 2 for h in range(n_heads)]
    centres_y = [la * step_y + (mq - 1) / 2 for la in range(n_layers)]
    fig = go.Figure(
        go.Heatmap(
            z=canvas,
            colorscale=SEQUENTIAL,
            zmin=0.0,
            zmax=float(np.nanmax(canvas)) if np.isfinite(canvas).any() else 1.0,
            hoverinfo="skip",
            colorbar={"title": "weight"},
        )
    )
    lx, hx = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")
    fig.add_trace(
        go.Scatter(
            x=[centres_x[h] for h in hx.ravel()],
            y=[centres_y[la] for la in lx.ravel()],
            mode="markers",
            marker={"size": max(8, min(40, 600 // max(n_heads, 1))), "opacity": 0, "symbol": "square"},
            customdata=np.stack([lx.ravel(), hx.ravel()], axis=1),
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}: click to open<extra></extra>",
            showlegend=False,
        )
    )
    ticks = [f"H{h}" if group == 1 else f"H{h}<br>kv{h // group}" for h in range(n_heads)]  # grouped-query heads
    fig.update_xaxes(tickvals=centres_x, ticktext=ticks, showgrid=False, zeroline=False)
    fig.update_yaxes(
        tickvals=centres_y,
        ticktext=[f"L{la}" for la in range(n_layers)],
        autorange="reversed",
        showgrid=False,
        zeroline=False,
        scaleanchor="x",
    )
    note = f" (each tile averaged over {f}×{f} token blocks)" if f > 1 else ""
    fig.update_layout(
        title={"text": f"All {plural(n_layers, 'layer')} × {plural(n_heads, 'head')}{note}", "font": {"size": 14}},
        height=int(min(900, max(320, 900 * n_layers / max(n_heads, 1) + 120))),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        clickmode="event+select",
    )
    return safe(fig)

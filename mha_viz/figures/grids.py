"""Many heatmaps at once: every head of a layer (heads_grid), every layer × head (overview)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.analysis.plans.long_views import short_labels
from mha_viz.figures.common import (
    CELL_HOVER,
    CLICK_OVERLAY_MAX_CELLS,
    GRID_MAX_CELLS,
    GRID_WIDTH_PX,
    LABEL_PX,
    OVERVIEW_TILE,
    OVERVIEW_TILE_PX,
    POOLED_HOVER,
    SEQUENTIAL,
    WEIGHT_HOVER,
    _esc,
    _f32,
    _grid,
    block_labels,
    category_ticks,
    click_marker,
    plural,
    pool_blocks,
    safe,
)
from mha_viz.figures.zoom import cap_for, cap_words, capped

_SCALE = [list(step) for step in go.layout.Coloraxis(colorscale=SEQUENTIAL).colorscale]  # as Plotly checks it


def heads_grid(
    pattern: np.ndarray,
    tokens: Sequence[str],
    titles: Sequence[str] | None = None,
    cols: int = 4,
    clickable: bool = True,
    key_tokens: Sequence[str] | None = None,
    value_name: str = "weight",
    pooled: int = 0,
    cap: bool = False,
    linked: bool = True,
) -> go.Figure:
    """heads_grid_spec's chart as a plotly figure (for the notebook API and figures that change it further)."""
    spec = heads_grid_spec(pattern, tokens, titles, cols, clickable, key_tokens, value_name, pooled, cap, linked)
    return go.Figure(spec, _validate=False)  # checked once, in tests (tests/test_finish.py)


def heads_grid_spec(
    pattern: np.ndarray,
    tokens: Sequence[str],
    titles: Sequence[str] | None = None,
    cols: int = 4,
    clickable: bool = True,
    key_tokens: Sequence[str] | None = None,
    value_name: str = "weight",
    pooled: int = 0,
    cap: bool = False,
    linked: bool = True,
) -> dict:
    """One heatmap per head on a shared colour scale (0 to the largest weight shown, or with ``cap`` (at length) for
    pooled maps to the zoom.cap_for percentile of the cells, the colour bar saying so; ``value_name`` titles it).

    With ``clickable`` and few enough cells, an invisible scatter marker sits on every cell, so a click reports
    (head, query, key) to Streamlit (heatmaps alone send no selection events); the markers then also carry the
    hover text "query → key: weight". Texts longer than
    GRID_MAX_CELLS tokens are shown averaged over token blocks (hover says "mean"); the single-head
    view shows every weight. Shapes: pattern [n_heads, query_pos, key_pos]; tokens [query_pos];
    key_tokens [key_pos] (default: tokens). ``pooled`` f > 0: ``pattern`` is already
    pool_blocks(pattern, m) with block side f, m <= GRID_MAX_CELLS (pooled once by the caller, who keeps the full one).
    ``linked`` False: the panels' axes are not linked with ``matches`` (a zoom in one moves no other; plotly.js draws
    it without a second pass over them, issue 36 §6): for panels that already share fixed ranges.
    """
    h = int(pattern.shape[0])
    keys = tokens if key_tokens is None else key_tokens
    pattern, f = (pattern, pooled) if pooled else pool_blocks(pattern, GRID_MAX_CELLS)
    if f > 1:  # blocks named by their first token, a whitespace run short ("0–127: ␣×19")
        tokens, keys = block_labels(short_labels(tokens), f), block_labels(short_labels(keys), f)
        clickable = False
    n, nk = len(tokens), len(keys)
    titles = list(titles) if titles is not None else [f"head {i}" for i in range(h)]
    rows, cols = _grid(h, cols)
    panel_w = GRID_WIDTH_PX / cols  # about how many pixels each small heatmap gets across
    # tall enough for a legible label per query row (up to 30), but never a sliver: at most twice as tall as wide
    panel_h = int(min(340, 2 * panel_w + 40, max(panel_w, 1.6 * LABEL_PX * min(n, 30), 150)))
    height = panel_h * rows + 60
    # The figure is written as Plotly's dict directly (what make_subplots + add_traces would produce, checked by
    # tests/test_finish.py against Plotly's own validation): building it through graph objects took 0.2-0.4 s
    # per layer, most of a layer change's server time.
    # panels at least 24 px apart: a panel's y axis has zoom handles 20 px wide on its left (plotly.js DRAGGERSIZE),
    # which would cover the top and bottom cells of the panel beside it (the axes' ranges end at the cells)
    x_dom = _domains(cols, max(0.015 if cols <= 4 else 0.008, 24 / GRID_WIDTH_PX))
    y_dom = _domains(rows, min(0.3 / rows, 34 / height) if rows > 1 else 0.0)[::-1]  # row 0 on top
    z = _f32(pattern)
    labels, klabels = [_esc(t) for t in tokens], [_esc(t) for t in keys]
    titles = [_esc(t) for t in titles]
    # One invisible marker per cell (hovermode "y" with one marker per row was cheaper to draw, but Plotly then
    # names the row marker's key in the heatmap's hover: a wrong cell under the pointer); click_marker draws one.
    overlay = clickable and h * n * nk <= CLICK_OVERLAY_MAX_CELLS
    qi, ki = np.meshgrid(np.arange(n), np.arange(nk), indexing="ij")
    cell_x = [klabels[k] for k in ki.ravel()]  # key label of every cell, row by row
    cell_y = [labels[q] for q in qi.ravel()]  # query label of every cell
    xticks, _ = category_ticks(klabels, 0.85 * panel_w, angle=-90)
    size = xticks["tickfont"]["size"]
    below = 12 + max((label_px(str(t), size) for t in xticks["ticktext"]), default=0.0)  # the vertical labels' room
    yticks, _ = category_ticks(labels, 0.85 * panel_h)
    plain = {"ticks": "", "showgrid": False, "zeroline": False}  # no marks poking into neighbouring panels
    traces, layout, titles_at = [], {}, []
    for i in range(rows * cols):  # every panel of the grid gets its axes (as make_subplots gives them)
        r, c = divmod(i, cols)
        ax = "" if i == 0 else str(i + 1)
        bottom = max(range(c, h, cols))  # the lowest panel in column c with a head: its labels show
        layout["xaxis" + ax] = {
            "anchor": "y" + ax, "domain": list(x_dom[c]), **plain, "range": [-0.5, nk - 0.5], **xticks,
            **({} if i == bottom else {"showticklabels": False}),
            **({"matches": f"x{bottom + 1 if bottom else ''}"} if linked and i != bottom else {}),
        }  # fmt: skip
        layout["yaxis" + ax] = {
            "anchor": "x" + ax, "domain": list(y_dom[r]), **plain, "range": [n - 0.5, -0.5], **yticks,
            **({} if c == 0 else {"showticklabels": False}),
            **({"matches": f"y{r * cols + 1 if r else ''}"} if linked and c != 0 else {}),
        }  # fmt: skip
        if i >= h:
            layout["xaxis" + ax]["visible"] = layout["yaxis" + ax]["visible"] = False  # an empty last-row panel
            continue
        titles_at.append((titles[i], sum(x_dom[c]) / 2, y_dom[r][1]))
        traces.append(
            {
                "type": "heatmap", "z": z[i], "x": klabels, "y": labels, "coloraxis": "coloraxis",
                "hovertemplate": POOLED_HOVER if f > 1 else WEIGHT_HOVER, "meta": titles[i], "name": titles[i],
                "xaxis": "x" + ax, "yaxis": "y" + ax, **({"hoverinfo": "skip"} if overlay else {}),
            }
        )  # fmt: skip
        if overlay:  # customdata per cell: (weight, head), numeric, so it travels as a typed array
            custom = np.stack([z[i].ravel(), np.full(n * nk, i, dtype=np.float32)], axis=1)
            traces.append(
                {
                    "type": "scatter", "x": cell_x, "y": cell_y, "mode": "markers", "marker": click_marker(12),
                    "customdata": custom, "hovertemplate": CELL_HOVER, "showlegend": False,
                    "name": f"{titles[i]} cells", "meta": titles[i], "xaxis": "x" + ax, "yaxis": "y" + ax,
                }
            )  # fmt: skip
    font = {"size": 12 if cols <= 4 else 10}
    layout["annotations"] = [
        {"font": font, "showarrow": False, "text": short_title(t, panel_w), "x": x, "xanchor": "center",
         "xref": "paper", "y": y, "yanchor": "bottom", "yref": "paper"}
        for t, x, y in titles_at
    ]  # fmt: skip  # the whole title is in each cell's hover
    level = cap_for(max(n, nk))
    top = capped(z, level) if cap and f > 1 else None  # at length: a sink column would leave every other cell dark
    layout.update(
        coloraxis={
            "colorscale": _SCALE, "cmin": 0.0, "cmax": top or (float(z.max()) if z.size else 1.0),
            "colorbar": {"title": {"text": _esc(value_name) + (cap_words(level) if top else "")}},
        },
        height=height + int(below), margin={"l": 10, "r": 10, "t": 40, "b": int(below)},
        hovermode="closest", clickmode="event+select", dragmode="zoom",
    )  # fmt: skip
    # a plain dict: even unchecked, go.Figure builds an object per trace and axis (most of a Heads page's figure
    # time); the dashboard draws this dict (ui.common.cached_figure), tests/test_figure_speed.py checks it is the
    # figure heads_grid gives
    return {"data": traces, "layout": layout}


def label_px(label: str, size: float) -> float:
    """A label's length in pixels at font ``size``, erring long (any symbol as wide as an M): the room a vertical
    label needs below its axis."""
    return size * sum(0.62 if c.isascii() else 1.0 for c in label)


def _domains(n: int, spacing: float) -> list[tuple[float, float]]:
    """``n`` equal parts of [0, 1], ``spacing`` apart, first to last (make_subplots' domains)."""
    width = (1 - spacing * (n - 1)) / n
    return [(i * (width + spacing), min(1.0, i * (width + spacing) + width)) for i in range(n)]


def short_title(title: str, px: float) -> str:
    """A panel title cut to about the width of its panel (``px`` pixels): "head 12 · previous tok…"."""
    most = max(6, int(px / 6.5))
    return title if len(title) <= most else title[: most - 1].rstrip() + "…"


BAR_PX = 320  # the Overview's colour bar's length (above the grid)
BAR_ROOM_PX = 62  # the room above the grid for the bar, its title and its tick labels


def overview(
    patterns: np.ndarray,
    tile: int = OVERVIEW_TILE,
    gap: int = 2,
    group: int = 1,
    cap: float | None = None,
    pooled: int = 1,
) -> go.Figure:
    """All layers × heads in one heatmap: one tile per head, rows = layers, columns = heads.

    Tiles larger than ``tile`` tokens are block-averaged down to about ``tile`` cells (the Heads view shows them at
    full resolution); with ``cap`` (a text at length) their colours stop at the cap_for(cells, cap) percentile of the
    cells (the colour bar says so; the hover gives each cell's value). One invisible marker per tile reports clicks
    as customdata (layer, head). ``pooled`` f > 1: ``patterns`` are already f×f block means (the caller pooled them).
    Shapes: patterns [n_layers, n_heads, n_query, n_key].
    """
    n_layers, n_heads = patterns.shape[:2]
    small, f = pool_blocks(patterns, tile)  # [L, H, mq, mk]
    f *= max(1, pooled)
    mq, mk = small.shape[-2:]
    step_y, step_x = mq + gap, mk + gap
    canvas = np.full((n_layers * step_y - gap, n_heads * step_x - gap), np.nan, dtype=np.float32)
    for layer in range(n_layers):
        for head in range(n_heads):
            canvas[layer * step_y : layer * step_y + mq, head * step_x : head * step_x + mk] = small[layer, head]
    centres_x = [h * step_x + (mk - 1) / 2 for h in range(n_heads)]
    centres_y = [la * step_y + (mq - 1) / 2 for la in range(n_layers)]
    cap = None if cap is None or f == 1 else cap_for(max(mq, mk), cap)
    top = None if cap is None else capped(canvas, cap)  # pooled at length: the colours stop at the cap percentile
    fig = go.Figure(
        go.Heatmap(
            z=canvas,
            colorscale=SEQUENTIAL,
            zmin=0.0,
            zmax=top or (float(np.nanmax(canvas)) if np.isfinite(canvas).any() else 1.0),
            hovertemplate=f"{'mean ' if f > 1 else ''}weight %{{z:.4g}}<extra></extra>",  # the real value
            hoverongaps=False,
            # above the grid, from its left edge: a bar at the right sat beyond an empty band wherever the square
            # tiles left the plot wider than the grid (a tall model: SmolLM2's 30 × 9 grid is ~360 of ~900 px);
            # its title on one line (the capped words' breaks were for a vertical bar)
            colorbar={
                "title": {"text": "weight" + (cap_words(cap).replace("<br>", " ") if top else ""), "side": "top"},
                "orientation": "h", "x": 0.0, "xanchor": "left", "y": 1.0, "yanchor": "bottom", "ypad": 6,
                "lenmode": "pixels", "len": BAR_PX, "thickness": 12,
            },
        )
    )  # fmt: skip
    lx, hx = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")
    fig.add_trace(
        go.Scatter(
            x=[centres_x[h] for h in hx.ravel()],
            y=[centres_y[la] for la in lx.ravel()],
            mode="markers",
            marker=click_marker(max(8, min(40, 600 // max(n_heads, 1))), "square"),
            customdata=np.stack([lx.ravel(), hx.ravel()], axis=1),
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}: click to open<extra></extra>",
            showlegend=False,
        )
    )
    # fixed ranges, the canvas exactly: autorange would pad them for the click markers (up to 40 px a side)
    fig.update_xaxes(tickvals=centres_x, showgrid=False, zeroline=False, constrain="domain", constraintoward="left",
                     range=[-0.5, canvas.shape[1] - 0.5])  # fmt: skip
    fig.update_yaxes(
        tickvals=centres_y,
        ticktext=[f"L{la}" for la in range(n_layers)],
        range=[canvas.shape[0] - 0.5, -0.5],  # row 0 (layer 0) on top
        showgrid=False,
        zeroline=False,
        scaleanchor="x",
        constrain="domain",  # square tiles by narrowing the plot, not by padding the range: the ticks hug the tiles
        constraintoward="top",  # a wide grid right under its colour bar
    )
    note = f" (each tile averaged over {f}×{f} token blocks)" if f > 1 else ""
    # square tiles (scaleanchor): as large as the width allows while the grid fits in 780 px, but never smaller
    # than OVERVIEW_TILE_PX a side (a 30-layer model grows taller instead of shrinking its tiles to slivers)
    tile_px = max(OVERVIEW_TILE_PX, min(GRID_WIDTH_PX / max(n_heads, 1), 780 / max(n_layers, 1)))
    fig.update_layout(
        title={"text": f"All {plural(n_layers, 'layer')} × {plural(n_heads, 'head')}{note}", "font": {"size": 14}},
        height=int(n_layers * tile_px + 120 + BAR_ROOM_PX),
        margin={"l": 10, "r": 10, "t": 50 + BAR_ROOM_PX, "b": 10},
        clickmode="event+select",
    )
    fig = safe(fig)
    # our own tick texts (no user text), set after escaping: a grouped-query head's <br> must stay a line break
    ticks = [f"H{h}" if group == 1 else f"H{h}<br>kv{h // group}" for h in range(n_heads)]
    fig.update_xaxes(ticktext=ticks)
    return fig

"""What every figure shares: colour scales, hover templates, block pooling, escaping, grid layout."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.analysis.plans.long_views import short_label
from mha_viz.pooling import block_means, pool_factor

WEIGHT_HOVER = "%{y} → %{x}: %{z:.3f}<extra>%{meta}</extra>"
CELL_HOVER = "%{y} → %{x}: %{customdata[0]:.3f}<extra>%{meta}</extra>"
SEQUENTIAL = "Viridis"
DIVERGING = "RdBu_r"
CLICK_OVERLAY_MAX_CELLS = 10_000  # click markers per figure; above this, heads open from the selector only
OVERVIEW_TILE = 48  # cells per Overview tile side: longer texts are block-averaged
OVERVIEW_TILE_PX = 40  # the least pixels a side an Overview tile is drawn with (many layers: a taller grid)
GRID_MAX_CELLS = 128  # per side of each small heatmap; longer texts are shown block-averaged
POOLED_HOVER = "%{y} → %{x}: mean %{z:.3f}<extra>%{meta}</extra>"
LABEL_PX = 10  # an axis shows at most one token label per this many pixels; the others are thinned out
GRID_WIDTH_PX = 900  # about how wide a full-width figure's plot area is (Streamlit's wide layout, 1500 px window)


def plural(n: int, word: str, many: str | None = None) -> str:
    """ "1 head", "2 heads" (``many`` for irregular plurals)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def label_step(n: int, px: float) -> int:
    """Show every k-th of ``n`` category labels on an axis about ``px`` pixels long (1: every label)."""
    return max(1, math.ceil(n * LABEL_PX / max(px, 1.0)))


def category_ticks(labels: Sequence[str], px: float, angle: int | None = None) -> tuple[dict, int]:
    """Settings for a category axis of token labels: every label while they fit in ``px`` pixels (smaller type
    as they get more), else every k-th label (the hover always names the token). Labels turned by ``angle``
    degrees stand |sin(angle)| times their spacing apart (side by side, parallel): that is the room they get, so
    rotated labels never overlap. Returns (settings, k)."""
    n = len(labels)
    room = px if angle is None else px * abs(math.sin(math.radians(angle)))
    step = label_step(n, room)
    shown = list(labels)[::step]
    size = int(min(11, max(8, room / max(len(shown), 1) - 3)))
    text = [short_label(t) for t in shown]  # a whitespace run as "␣×19", not 19 marks (the hover keeps the whole)
    ticks = {"type": "category", "tickmode": "array", "tickvals": shown, "ticktext": text, "tickfont": {"size": size}}
    if angle is not None:
        ticks["tickangle"] = angle
    return ticks, step


def pool_blocks(stack: np.ndarray, max_cells: int) -> tuple[np.ndarray, int]:
    """Average the last two axes over f×f blocks so each side has at most ``max_cells`` cells.

    The last block on each side may be partial (it averages the positions it has). Shapes:
    [..., n_q, n_k] -> ([..., ceil(n_q / f), ceil(n_k / f)], f).
    """
    f = pool_factor(int(stack.shape[-2]), int(stack.shape[-1]), max_cells)
    return (_f32(stack), 1) if f == 1 else (block_means(stack, f), f)


def block_labels(tokens: Sequence[str], f: int) -> list[str]:
    """Axis labels for f-token blocks: "first–last: first token" (distinct by position)."""
    n = len(tokens)
    return [f"{a}–{min(a + f, n) - 1}: {tokens[a]}" for a in range(0, n, f)]


def _esc(value: object) -> object:
    """Text for Plotly, shown as typed: Plotly renders a few tags (<b>, <a href>, <span style>, <br>)
    in labels, titles and hover text, so & < > become entities (which it displays literally)."""
    return html.escape(value, quote=False) if isinstance(value, str) else value


def _esc_seq(values):
    if isinstance(values, tuple | list):  # nested lists too (a heatmap's cell text)
        return type(values)(_esc_seq(v) if isinstance(v, tuple | list) else _esc(v) for v in values)
    if isinstance(values, np.ndarray) and values.dtype == object:
        return np.vectorize(_esc, otypes=[object])(values) if values.size else values
    return values


def safe(fig: go.Figure) -> go.Figure:
    """Escape every text that can come from users (token labels, titles, names) in a finished figure.

    Hover templates are ours and never embed user text: they refer to %{x}, %{y}, %{meta}, %{customdata},
    which are escaped here.
    """
    for trace in fig.data:
        for attr in ("x", "y", "customdata", "text"):
            values = getattr(trace, attr, None)
            if values is not None:
                setattr(trace, attr, _esc_seq(values))
        for attr in ("name", "meta"):
            if isinstance(getattr(trace, attr, None), str):
                setattr(trace, attr, _esc(getattr(trace, attr)))
    layout = fig.layout
    if layout.title and layout.title.text:
        layout.title.text = _esc(layout.title.text)
    for ann in layout.annotations or ():
        ann.text = _esc(ann.text)
    for axis in [k for k in layout if k.startswith(("xaxis", "yaxis"))]:
        for attr in ("ticktext", "tickvals"):  # tickvals name categories (token labels) on category axes
            if layout[axis][attr] is not None:
                layout[axis][attr] = _esc_seq(list(layout[axis][attr]))
    return fig


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def _grid(n: int, cols: int) -> tuple[int, int]:
    cols = max(1, min(cols, n))
    return math.ceil(n / cols), cols


def style_layer_head_map(fig: go.Figure, n_layers: int, n_heads: int, title: str) -> go.Figure:
    """Axes, size and click behaviour of a layer (rows) × head (columns) map (roles, induction scores)."""
    layout = layer_head_layout(n_layers, n_heads, title)
    fig.update_xaxes(**layout.pop("xaxis"))
    fig.update_yaxes(**layout.pop("yaxis"))
    fig.update_layout(**layout)
    return fig


def layer_head_layout(n_layers: int, n_heads: int, title: str) -> dict:
    """style_layer_head_map's settings as a plain layout dict (a figure built as a dict takes it as it is)."""
    return {
        "xaxis": {"tickvals": list(range(n_heads)), "ticktext": [f"H{h}" for h in range(n_heads)], "showgrid": False,
                  "zeroline": False},
        "yaxis": {"tickvals": list(range(n_layers)), "ticktext": [f"L{la}" for la in range(n_layers)],
                  "autorange": "reversed", "showgrid": False, "zeroline": False},
        "title": {"text": title, "font": {"size": 14}},
        "height": int(min(1000, max(300, 22 * n_layers + 110))),
        "margin": {"l": 10, "r": 10, "t": 50, "b": 10},
        "hovermode": "closest",
        "clickmode": "event+select",
    }  # fmt: skip


def click_marker(size: int, symbol: str = "circle") -> dict:
    """An invisible marker that still hovers and reports a click: Plotly hovers and selects from the data (every
    point), but with ``maxdisplayed`` 1 it draws one SVG marker per trace instead of one per cell (the Heads grid
    drew in 0.47 s with a marker per cell, 0.16 s with this; 0.14 s with no markers at all)."""
    return {"size": size, "opacity": 0, "symbol": symbol, "maxdisplayed": 1}


def add_click_overlay(fig: go.Figure, values: np.ndarray, value_name: str) -> None:
    """One invisible marker per layer × head cell that carries the hover text and reports a click as customdata
    (layer, head, value). Shapes: values [L, H]."""
    n_layers, n_heads = values.shape
    lx, hx = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")
    custom = _f32(np.stack([lx.ravel(), hx.ravel(), np.asarray(values, dtype=np.float64).ravel()], axis=1))
    fig.add_trace(
        go.Scatter(
            x=hx.ravel().astype(np.float32),
            y=lx.ravel().astype(np.float32),
            mode="markers",
            marker=click_marker(max(8, min(30, 600 // max(n_heads, 1))), "square"),
            customdata=custom,
            meta=value_name,
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}: %{meta} %{customdata[2]:.3f}"
            "<br>click to open<extra></extra>",
            showlegend=False,
        )
    )

"""Figures of the Lesson and W^O tabs: masked scores whose hover says −∞, two matrices with their difference,
and W^O itself with one band per head."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha_viz.figures.common import DIVERGING, SEQUENTIAL, _esc, _f32, block_labels, safe
from mha_viz.figures.finish import Finished
from mha_viz.figures.heatmap import matrix_heatmap, wrap_title

MAX_TEXT_CELLS = 40_000  # masked scores up to this many cells get a hover text per cell ("−∞ (masked)")
MAX_WO_CELLS = 192  # per side of the W^O heatmap; larger W^O is shown as block means (never across two heads)
MAX_COMPARISON_CELLS = 60_000  # per matrix of a comparison; larger ones are shown as block means


def scores_heatmap(
    z: np.ndarray,
    x: Sequence[str],
    y: Sequence[str],
    title: str,
    height: int | None = None,
    title_chars: int | None = None,
) -> go.Figure:
    """Masked scores: −∞ cells are blank and their hover says "−∞ (masked)" (above MAX_TEXT_CELLS cells, they have
    no hover); never NaN. Shapes: z [n_q, n_k]."""
    fig = matrix_heatmap(z, x, y, title, diverging=True, value_name="score", height=height, title_chars=title_chars)
    data = np.asarray(z, dtype=np.float64)
    if data.size > MAX_TEXT_CELLS:  # long texts: masked cells have no hover at all (the title says blank = −∞)
        return fig.update_traces(hoverongaps=False)
    text = np.where(np.isfinite(data), np.char.mod("%.4f", np.nan_to_num(data)), "−∞ (masked)").astype(object)
    fig.update_traces(text=text, hovertemplate="%{y} → %{x}: %{text}<extra>score</extra>", hoverongaps=True)
    return fig  # matrix_heatmap escaped the labels and title (once: a second safe() would show "&amp;"); text is ours


def mark_row(fig: dict, row: int, label: str) -> Finished:
    """A finished matrix figure with one row outlined (the Lesson's "it"), as a new dict: the cached one is shared
    and stays as it is. ``row`` counts from the top (the y axis is reversed); the outline spans every column."""
    layout = dict(fig["layout"])
    layout["shapes"] = [
        *layout.get("shapes", ()),
        {"type": "rect", "xref": "x domain", "x0": 0.0, "x1": 1.0, "yref": "y", "y0": row - 0.5, "y1": row + 0.5,
         "line": {"color": "#d62728", "width": 2}, "fillcolor": "rgba(0,0,0,0)", "layer": "above",
         "name": _esc(f"row of {label}")},
    ]  # fmt: skip
    return Finished(data=fig["data"], layout=layout)


def comparison(
    left: np.ndarray, right: np.ndarray, names: tuple[str, str], rows: Sequence[str], title: str
) -> go.Figure:
    """Two matrices that should be equal, side by side, and |left − right| (its own colour scale).
    Shapes: left, right [n, d]; rows [n]."""
    diff = np.abs(np.asarray(left, dtype=np.float64) - np.asarray(right, dtype=np.float64))
    worst = float(diff.max()) if diff.size else 0.0  # from every entry, also when the picture is pooled
    a, b, diff = _f32(left), _f32(right), _f32(diff)
    f = max(1, math.ceil(math.sqrt(a.size / MAX_COMPARISON_CELLS)))
    if f > 1:  # long texts: block means keep the page light; the title says so
        a, b, diff = (_pool_axis(_pool_axis(m, f, 0), f, 1) for m in (a, b, diff))
        rows = block_labels(list(rows), f)
        title += f" (shown as {f} × {f} block means; the max is over every entry)"
    titles = (
        f"{names[0]}   [{np.shape(left)[0]} × {np.shape(left)[1]}]",
        f"{names[1]}   [{np.shape(right)[0]} × {np.shape(right)[1]}]",
        f"|difference|, max {worst:.2e}" if worst > 0 else "|difference|: 0 everywhere (identical)",
    )
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.06)
    labels = list(rows)
    cols = list(range(0, np.shape(left)[1], f))
    lim = float(max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0))) or 1.0
    for j, (z, name, axis) in enumerate(
        ((a, names[0], "coloraxis"), (b, names[1], "coloraxis"), (diff, "|difference|", "coloraxis2"))
    ):
        fmt = ".2e" if axis == "coloraxis2" else ".4f"
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=cols,
                y=labels,
                coloraxis=axis,
                meta=name,
                hovertemplate=f"%{{y}}, dimension %{{x}}: %{{z:{fmt}}}<extra>%{{meta}}</extra>",
            ),
            row=1,
            col=j + 1,
        )
    fig.update_layout(
        coloraxis={
            "colorscale": DIVERGING,
            "cmin": -lim,
            "cmax": lim,
            "colorbar": {
                "orientation": "h",
                "x": 0.33,
                "xanchor": "center",
                "y": -0.08,
                "yanchor": "top",
                "len": 0.6,
                "thickness": 12,
            },
        },
        coloraxis2={
            "colorscale": SEQUENTIAL,
            "cmin": 0.0,
            "cmax": float(diff.max()) if diff.max() > 0 else 1.0,
            "colorbar": {
                "orientation": "h",
                "x": 0.85,
                "xanchor": "center",
                "y": -0.08,
                "yanchor": "top",
                "len": 0.28,
                "thickness": 12,
                "exponentformat": "e",
            },
        },
        title={"text": title, "font": {"size": 14}},
        height=int(min(680, max(380, 18 * len(labels) + 220))),
        margin={"l": 10, "r": 10, "t": 80, "b": 70},
    )
    # reversed as a fixed range, not autorange="reversed": shared (matched) autoranged axes look changed to plotly.js
    # after the first draw, and the chart is drawn again
    fig.update_yaxes(range=[len(labels) - 0.5, -0.5], type="category")
    for ann in fig.layout.annotations:
        ann.font = {"size": 12}
    return safe(fig)


def _pool_axis(m: np.ndarray, f: int, axis: int) -> np.ndarray:
    """Means over f consecutive entries along ``axis`` (the last group may be shorter)."""
    if f == 1:
        return m
    n = m.shape[axis]
    starts = np.arange(0, n, f)
    return np.add.reduceat(m, starts, axis=axis) / np.diff(np.append(starts, n)).reshape(
        (-1, 1) if axis == 0 else (1, -1)
    )


def wo_heatmap(
    W_O: np.ndarray, title: str, max_cells: int = MAX_WO_CELLS, title_chars: int | None = None
) -> tuple[go.Figure, str]:
    """W^O as one matrix, rows = the concat dimension (head by head), columns = d_model, with a band per head.

    Larger than ``max_cells`` a side, it is drawn as block means (rows pooled within a head, never across two):
    the returned note says so ("" when every entry is drawn). ``title_chars``: a longer title breaks into lines
    (heatmap.wrap_title), for a figure drawn two to a row. Shapes: W_O [h, d_head, d_model].
    """
    h, dk, d = W_O.shape
    m = _f32(W_O).reshape(h * dk, d)  # [h*dk, d]
    fr = next((f for f in range(1, dk + 1) if dk % f == 0 and h * dk / f <= max_cells), dk)
    fc = max(1, math.ceil(d / max_cells))
    z = _pool_axis(_pool_axis(m, fr, 0), fc, 1).astype(np.float32)
    note, pooled = "", fr > 1 or fc > 1
    if pooled:
        note = (
            f"W^O has {h * dk} × {d} entries: each cell shows the mean of a {fr} × {fc} block (rows of one "
            "head only), to keep the page light and readable; the download has every entry."
        )
        title += f" · shown as {fr} × {fc} block means"
    ys, xs = np.arange(0, h * dk, fr), np.arange(0, d, fc)
    lim = float(np.abs(z).max(initial=0.0)) or 1.0
    rspan = "" if fr == 1 else f"…+{fr - 1}"
    cspan = "" if fc == 1 else f"…+{fc - 1}"
    value = "mean %{z:.4f}" if pooled else "%{z:.4f}"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=xs,
            y=ys,
            colorscale=DIVERGING,
            zmid=0.0,
            zmin=-lim,
            zmax=lim,
            meta="W^O",
            colorbar={"title": "block mean" if pooled else "weight"},
            hovertemplate=f"concat row %{{y}}{rspan}, d_model column %{{x}}{cspan}: {value}<extra>W^O</extra>",
        )
    )
    every = max(1, math.ceil(h / 32))  # at most 32 head labels
    fig.update_yaxes(
        autorange="reversed",
        tickvals=[j * dk + (dk - fr) / 2 for j in range(0, h, every)],
        ticktext=[f"head {j}" for j in range(0, h, every)],
        title={"text": "concat dimension (h · d_k), one band per head"},
        showgrid=False,
    )
    fig.update_xaxes(title={"text": "d_model"}, showgrid=False)
    for j in range(1, h):
        fig.add_hline(y=j * dk - fr / 2, line={"color": "black", "width": 1})
    lines = wrap_title(_esc(title), title_chars)
    fig.update_layout(
        title={"font": {"size": 14}},
        height=int(min(900, max(420, 1.2 * len(ys) + 120))) + 18 * (len(lines) - 1),
        margin={"l": 10, "r": 10, "t": 50 + 18 * (len(lines) - 1), "b": 10},
    )
    fig = safe(fig)
    fig.layout.title.text = "<br>".join(lines)  # escaped above: the <br> stays a line break
    return fig, note

"""The pooled exact map of one head at length, on which a zoom window is drawn as a box (issue 38 §3): its axes are
token positions (x: keys, y: queries), each cell the mean weight of an f×f block, the current zoom outlined, and a
sparse grid of invisible markers so that a box drawn with Plotly's box select reports its corners."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import SEQUENTIAL, _f32, safe

MARKS = 48  # invisible markers a side: box select needs a selectable trace (a heatmap has none)
CAP_PERCENTILE = 99.0  # the colour scale stops here (the hover gives every value)
MIN_BOX = 0.025  # the zoom's box is drawn at least this fraction of the map a side (64 of 8,192 keys: 4 px)
BOX_RED, BOX_EDGE = "#ff4136", "#ffffff"  # the box, and the outline around it (seen on yellow and on purple)


def capped(values: np.ndarray, cap: float = CAP_PERCENTILE) -> float | None:
    """The ``cap`` percentile of the finite values where it is positive and below their largest (the colours then
    stop there), else None (nothing to cap)."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return None
    top = float(np.percentile(finite, cap))
    return top if 0 < top < float(finite.max()) else None


def cap_for(side: int, cap: float = CAP_PERCENTILE) -> float:
    """The colour cap of a pooled map ``side`` cells a side: ``cap``, or lower on a coarse map, so that a sink column
    and the diagonal (about 2.5 cells of each row) still lie above it (64 cells: the 96th percentile; 48: the 95th):
    at the 99th, a 64-cell map's colours would stop inside its sink column and leave the rest as dark as before."""
    return float(min(cap, math.floor(100 * (1 - 2.5 / max(side, 1)))))


def cap_words(cap: float = CAP_PERCENTILE) -> str:
    """What the colour bar says when capped (the hover gives the real values)."""
    return f"<br>(colours stop at<br>the {cap:g}th<br>percentile)"


def pooled_map(
    tiles: np.ndarray, f: int, n_q: int, n_k: int, title: str, box: tuple[int, int, int, int] | None = None,
    value_name: str = "weight", height: int = 680, cap: float = CAP_PERCENTILE,
) -> go.Figure:  # fmt: skip
    """One head's f×f tile means on axes of token positions, ``box`` (q0, q1, k0, k1: the zoom, half-open) outlined.
    The colours stop at the ``cap`` percentile of the cells (a sink column's few bright cells would leave every
    other cell dark; the colour bar says so, the hover gives every value). Shapes: tiles [ceil(n_q/f), ceil(n_k/f)]."""
    data = _f32(tiles).copy()
    data[~np.isfinite(data)] = np.nan
    top = capped(data, cap)
    fig = go.Figure(
        go.Heatmap(
            z=data,
            x0=(f - 1) / 2,
            dx=f,
            y0=(f - 1) / 2,
            dy=f,
            colorscale=SEQUENTIAL,
            zmin=0.0,
            zmax=top,
            colorbar={"title": {"text": f"mean {value_name}" + (cap_words(cap) if top is not None else "")}},
            hovertemplate=(
                f"queries ≈ %{{y:.0f}} → keys ≈ %{{x:.0f}}<br>mean {value_name} of the {f}×{f} block: %{{z:.3g}}"
                "<extra></extra>"
            ),
        )
    )
    xs, ys = np.linspace(0, n_k - 1, min(MARKS, n_k)), np.linspace(0, n_q - 1, min(MARKS, n_q))
    gx, gy = np.meshgrid(xs, ys)
    fig.add_trace(
        go.Scatter(
            x=np.round(gx.ravel(), 1),
            y=np.round(gy.ravel(), 1),
            mode="markers",
            marker={"opacity": 0, "size": 4},
            hoverinfo="skip",
            showlegend=False,
            name="box",
        )
    )
    if box is not None:
        _box(fig, box, n_q, n_k)
    fig.update_layout(
        title={"text": title},
        height=height,
        dragmode="select",
        selectdirection="any",
        margin={"l": 70, "r": 20, "t": 60, "b": 60},
        xaxis={"title": {"text": "key position (token index)"}, "range": [-0.5, n_k - 0.5], "constrain": "domain"},
        yaxis={"title": {"text": "query position (token index)"}, "range": [n_q - 0.5, -0.5],
               "scaleanchor": "x", "constrain": "domain"},
    )  # fmt: skip
    return safe(fig)


def drawn_box(box: tuple[int, int, int, int], n_q: int, n_k: int) -> tuple[float, float, float, float]:
    """The zoom's box as drawn (x0, x1, y0, y1, in positions): the window, or, where it is smaller than MIN_BOX of
    the map a side, that size around its centre (kept inside the map), so that it is always seen."""
    q0, q1, k0, k1 = box

    def side(a: int, b: int, n: int) -> tuple[float, float]:
        least = MIN_BOX * n
        if b - a >= least:
            return a - 0.5, b - 0.5
        mid = min(max((a + b) / 2, least / 2), n - least / 2)
        return mid - least / 2 - 0.5, mid + least / 2 - 0.5

    (x0, x1), (y0, y1) = side(k0, k1, n_k), side(q0, q1, n_q)
    return x0, x1, y0, y1


def _box(fig: go.Figure, box: tuple[int, int, int, int], n_q: int, n_k: int) -> None:
    """The red box (drawn_box) inside a white outline, and a label "zoom" beside it where it was enlarged."""
    x0, x1, y0, y1 = drawn_box(box, n_q, n_k)
    fig.add_shape(type="rect", x0=x0, x1=x1, y0=y0, y1=y1, line={"color": BOX_RED, "width": 3})
    pad = 0.006 * max(n_q, n_k)  # the outline just outside the red line (about 3 px)
    fig.add_shape(type="rect", x0=x0 - pad, x1=x1 + pad, y0=y0 - pad, y1=y1 + pad,
                  line={"color": BOX_EDGE, "width": 1.5})  # fmt: skip
    q0, q1, k0, k1 = box
    if (x0, x1, y0, y1) != (k0 - 0.5, k1 - 0.5, q0 - 0.5, q1 - 0.5):  # enlarged: say which box it is
        right = (x0 + x1) / 2 < n_k / 2  # the label on the side with room (never cut at the map's edge)
        fig.add_annotation(x=x1 + pad if right else x0 - pad, y=(y0 + y1) / 2, text="zoom", showarrow=False,
                           xanchor="left" if right else "right", font={"color": BOX_RED, "size": 13},
                           bgcolor=BOX_EDGE)  # fmt: skip


def focus_row_map(
    top: np.ndarray, top_key: np.ndarray, sums: np.ndarray, f: int, key_labels: Sequence[str],
    head_titles: Sequence[str], title: str, value_name: str = "weight", cap: float = CAP_PERCENTILE,
) -> go.Figure:  # fmt: skip
    """The focus token's exact row in every head at length, by blocks of f keys (analysis.plans.long_views.row_blocks):
    each cell the block's largest weight on axes of key positions, colours stopping at the ``cap`` percentile (the
    colour bar says so); the hover names the block, its top key, that key's exact weight and the block's sum.
    Shapes: top, top_key, sums [h, ceil(n_k / f)]; key_labels [n_k]; head_titles [h]."""
    h, m = top.shape
    z = _f32(top)
    level = capped(z, cap)
    n_k = len(key_labels)
    ends = np.minimum(np.arange(m) * f + f, n_k) - 1
    custom = np.stack([np.broadcast_to(np.arange(m) * f, (h, m)), np.broadcast_to(ends, (h, m)), top_key, sums],
                      axis=-1).astype(np.float32)  # fmt: skip  # [h, m, 4]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x0=(f - 1) / 2,
            dx=f,
            y=list(head_titles),
            customdata=custom,
            text=[[key_labels[int(k)] for k in row] for row in top_key],
            colorscale=SEQUENTIAL,
            zmin=0.0,
            zmax=level,
            colorbar={"title": {"text": f"largest {value_name}<br>of {f} keys" + (cap_words(cap) if level else "")}},
            hovertemplate=(
                f"%{{y}}, keys %{{customdata[0]:,.0f}}–%{{customdata[1]:,.0f}}: top key “%{{text}}” "
                f"{value_name} %{{z:.4f}}<br>sum over the {f} keys: %{{customdata[3]:.4f}}<extra></extra>"
            ),
        )
    )
    fig.update_layout(
        title={"text": title}, height=int(min(420, 60 + 26 * h + 110)), margin={"l": 70, "r": 10, "t": 60, "b": 60},
        xaxis={"title": {"text": "key position (token index)"}, "range": [-0.5, n_k - 0.5]},
        yaxis={"autorange": "reversed"},
    )  # fmt: skip
    return safe(fig)

"""The pooled exact map of one head at length, on which a zoom window is drawn as a box (issue 38 §3): its axes are
token positions (x: keys, y: queries), each cell the mean weight of an f×f block, the current zoom outlined, and a
sparse grid of invisible markers so that a box drawn with Plotly's box select reports its corners."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import SEQUENTIAL, _f32, safe

MARKS = 48  # invisible markers a side: box select needs a selectable trace (a heatmap has none)
CAP_PERCENTILE = 99.0  # the colour scale stops here (the hover gives every value)


def pooled_map(
    tiles: np.ndarray, f: int, n_q: int, n_k: int, title: str, box: tuple[int, int, int, int] | None = None,
    value_name: str = "weight", height: int = 680, cap: float = CAP_PERCENTILE,
) -> go.Figure:  # fmt: skip
    """One head's f×f tile means on axes of token positions, ``box`` (q0, q1, k0, k1: the zoom, half-open) outlined.
    The colours stop at the ``cap`` percentile of the cells (a sink column's few bright cells would leave every
    other cell dark; the colour bar says so, the hover gives every value). Shapes: tiles [ceil(n_q/f), ceil(n_k/f)]."""
    data = _f32(tiles).copy()
    data[~np.isfinite(data)] = np.nan
    finite = data[np.isfinite(data)]
    top = float(np.percentile(finite, cap)) if finite.size else 1.0
    capped = finite.size > 0 and top < float(finite.max())
    fig = go.Figure(
        go.Heatmap(
            z=data,
            x0=(f - 1) / 2,
            dx=f,
            y0=(f - 1) / 2,
            dy=f,
            colorscale=SEQUENTIAL,
            zmin=0.0,
            zmax=top if capped and top > 0 else None,
            colorbar={
                "title": {
                    "text": f"mean {value_name}"
                    + (f"<br>(colours stop at<br>the {cap:g}th<br>percentile)" if capped and top > 0 else "")
                }
            },
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
        q0, q1, k0, k1 = box
        fig.add_shape(type="rect", x0=k0 - 0.5, x1=k1 - 0.5, y0=q0 - 0.5, y1=q1 - 0.5,
                      line={"color": "#ff4136", "width": 2})  # fmt: skip
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

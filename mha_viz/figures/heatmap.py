"""One heatmap of any matrix: a head's pattern, Q_i, a difference..."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import DIVERGING, SEQUENTIAL, WEIGHT_HOVER, _f32, safe


def matrix_heatmap(
    z: np.ndarray,
    x: Sequence[str] | None = None,
    y: Sequence[str] | None = None,
    title: str = "",
    diverging: bool = False,
    value_name: str = "value",
    height: int | None = None,
    attention: bool = False,
) -> go.Figure:
    """One heatmap of any matrix (a head's pattern, Q_i, a difference...), with its title.

    ``diverging`` centres a red-blue scale on 0 (for signed values and differences); otherwise
    Viridis. -inf (masked scores) shows as a gap. ``attention`` uses the "query → key" hover.
    Shapes: z [rows, cols]; x [cols]; y [rows].
    """
    data = _f32(z).copy()
    data[~np.isfinite(data)] = np.nan
    rows, cols = data.shape
    xl = list(x) if x is not None else list(range(cols))
    yl = list(y) if y is not None else list(range(rows))
    finite = data[np.isfinite(data)]
    if diverging:
        lim = float(np.abs(finite).max()) if finite.size else 1.0
        scale = {"colorscale": DIVERGING, "zmid": 0.0, "zmin": -lim, "zmax": lim}
    else:
        scale = {"colorscale": SEQUENTIAL}
    hover = WEIGHT_HOVER if attention else f"row %{{y}}, column %{{x}}: %{{z:.4f}}<extra>{value_name}</extra>"
    fig = go.Figure(
        go.Heatmap(z=data, x=xl, y=yl, hovertemplate=hover, meta=title, colorbar={"title": value_name}, **scale)
    )
    fig.update_yaxes(autorange="reversed")
    if x is not None:
        fig.update_xaxes(type="category", tickangle=-60)
    if y is not None:
        fig.update_yaxes(type="category")
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=height or int(min(720, max(300, 26 * rows + 140))),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return safe(fig)

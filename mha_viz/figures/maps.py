"""A clickable layer × head map of one number per head (a weight, a moved weight, a change)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import DIVERGING, SEQUENTIAL, _f32, safe, style_layer_head_map


def layer_head_values(values: np.ndarray, title: str, value_name: str, diverging: bool = False) -> go.Figure:
    """Layer (rows) × head (columns) heatmap of ``values``; one invisible marker per cell carries the hover text
    and reports clicks as customdata (layer, head, value). ``diverging`` centres a red-blue scale on 0 (signed
    values). Non-finite values show as gaps. Shapes: values [L, H]."""
    n_layers, n_heads = values.shape
    data = _f32(values).copy()
    data[~np.isfinite(data)] = np.nan
    finite = data[np.isfinite(data)]
    if diverging:
        lim = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
        scale = {"colorscale": DIVERGING, "zmid": 0.0, "zmin": -lim, "zmax": lim}
    else:
        scale = {"colorscale": SEQUENTIAL}
    fig = go.Figure(
        go.Heatmap(
            z=data,
            x=list(range(n_heads)),
            y=list(range(n_layers)),
            xgap=1,
            ygap=1,
            hoverinfo="skip",
            colorbar={"title": {"text": value_name}},
            **scale,
        )
    )
    lx, hx = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")
    custom = _f32(np.stack([lx.ravel(), hx.ravel(), data.astype(np.float64).ravel()], axis=1))
    fig.add_trace(
        go.Scatter(
            x=hx.ravel().astype(np.float32),
            y=lx.ravel().astype(np.float32),
            mode="markers",
            marker={"size": max(8, min(30, 600 // max(n_heads, 1))), "opacity": 0, "symbol": "square"},
            customdata=custom,
            meta=value_name,
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}: %{meta} %{customdata[2]:.3f}"
            "<br>click to open<extra></extra>",
            showlegend=False,
        )
    )
    style_layer_head_map(fig, n_layers, n_heads, title)
    return safe(fig)

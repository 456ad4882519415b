"""A clickable layer × head map of one number per head (a weight, a moved weight, a change)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import DIVERGING, SEQUENTIAL, _f32, add_click_overlay, safe, style_layer_head_map


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
    add_click_overlay(fig, data, value_name)
    style_layer_head_map(fig, n_layers, n_heads, title)
    return safe(fig)

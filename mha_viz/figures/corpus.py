"""The Corpus view's figures: layer × head maps of a corpus statistic (click a cell to open the head on one of its
most typical texts) and Clark et al. 2019's Figure 2 analogue (attention to [CLS], [SEP] and punctuation by layer).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import SEQUENTIAL, _f32, click_marker, safe, style_layer_head_map

CLARK_COLOURS = ("#1f77b4", "#d62728", "#2ca02c")  # [CLS], [SEP], punctuation


def corpus_map(
    values: np.ndarray, title: str, value_name: str, typical: np.ndarray, labels: np.ndarray | None = None,
    zmax: float | None = None,
) -> go.Figure:  # fmt: skip
    """Layer (rows) × head (columns) heatmap of a corpus statistic. One invisible marker per cell carries the hover
    (with the head's label when ``labels`` is given) and reports a click as customdata (layer, head, value, index of
    the head's most typical text; -1: none). Shapes: values, typical [L, H]; labels [L, H] str."""
    n_layers, n_heads = values.shape
    data = _f32(values).copy()  # [L, H]
    data[~np.isfinite(data)] = np.nan
    fig = go.Figure(
        go.Heatmap(
            z=data, x=list(range(n_heads)), y=list(range(n_layers)), xgap=1, ygap=1, hoverinfo="skip",
            colorscale=SEQUENTIAL, zmin=0.0, zmax=zmax, colorbar={"title": {"text": value_name, "side": "right"}},
        )
    )  # fmt: skip
    lx, hx = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")  # [L, H] each
    columns = [lx, hx, np.asarray(values, dtype=np.float64), np.asarray(typical, dtype=np.float64)]
    custom = _f32(np.stack([c.ravel() for c in columns], axis=1))  # [L·H, 4]
    label_line = "<br>label %{text}" if labels is not None else ""
    fig.add_trace(
        go.Scatter(
            x=hx.ravel().astype(np.float32), y=lx.ravel().astype(np.float32), mode="markers",
            marker=click_marker(max(8, min(30, 600 // max(n_heads, 1))), "square"),
            customdata=custom, meta=value_name,
            text=None if labels is None else np.asarray(labels, dtype=object).ravel(),
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}: %{meta} %{customdata[2]:.3f}"
            + label_line + "<br>click to open on a typical text<extra></extra>",
            showlegend=False,
        )
    )  # fmt: skip
    style_layer_head_map(fig, n_layers, n_heads, title)
    fig.update_layout(margin={"l": 10, "r": 10, "t": 60, "b": 10})
    return safe(fig)


def clark_lines(by_layer: Mapping[str, np.ndarray], title: str) -> go.Figure:
    """Mean attention to each target (series name → [L] per layer; all-NaN series are left out) by layer, one
    line each, as Clark et al. 2019 draw it in their Figure 2."""
    fig = go.Figure()
    for (name, ys), colour in zip(by_layer.items(), CLARK_COLOURS, strict=False):
        y = np.asarray(ys, dtype=np.float64)  # [L]
        if not np.isfinite(y).any():
            continue
        fig.add_trace(
            go.Scatter(
                x=np.arange(len(y), dtype=np.float32), y=_f32(y), mode="lines+markers", name=name, meta=name,
                line={"color": colour}, hovertemplate="layer %{x}: %{y:.3f}<extra>%{meta}</extra>",
            )
        )  # fmt: skip
    n = max((len(v) for v in by_layer.values()), default=1)
    fig.update_xaxes(title={"text": "layer"}, tickmode="linear", tick0=0, dtick=1 if n <= 16 else 2,
                     range=[-0.5, n - 0.5])  # fmt: skip
    fig.update_yaxes(title={"text": "mean attention"}, rangemode="tozero")
    fig.update_layout(
        title={"text": title, "font": {"size": 14}}, height=380, margin={"l": 10, "r": 10, "t": 60, "b": 10},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        hovermode="closest",
    )  # fmt: skip
    return safe(fig)

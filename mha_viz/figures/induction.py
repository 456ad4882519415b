"""Figures of the induction experiment: the layer × head score map and the loss on each copy."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import SEQUENTIAL, _f32, add_click_overlay, safe, style_layer_head_map


def induction_map(scores: np.ndarray, title: str) -> go.Figure:
    """Layer (rows) × head (columns) heatmap of the scores, 0 to 1; one invisible marker per cell carries the
    hover text and reports clicks as customdata (layer, head, score). Shapes: scores [L, H]."""
    n_layers, n_heads = scores.shape
    fig = go.Figure(
        go.Heatmap(
            z=_f32(scores),
            x=list(range(n_heads)),
            y=list(range(n_layers)),
            colorscale=SEQUENTIAL,
            zmin=0.0,
            zmax=1.0,
            xgap=1,
            ygap=1,
            hoverinfo="skip",
            colorbar={"title": {"text": "induction"}},
        )
    )
    add_click_overlay(fig, np.asarray(scores), "induction")
    style_layer_head_map(fig, n_layers, n_heads, title)
    return safe(fig)


def loss_lines(first: np.ndarray, second: np.ndarray) -> go.Figure:
    """The loss of each token of the first copy and of the second, by position in the copy.

    Shapes: first, second [copy length] (nats; NaN where a position has no loss)."""
    x = np.arange(len(first))
    fig = go.Figure(
        [
            go.Scatter(
                x=x,
                y=_f32(losses),
                mode="lines+markers",
                name=f"{name} copy (mean {float(np.nanmean(losses)):.2f})",
                hovertemplate=f"token %{{x}} of the {name} copy: loss %{{y:.2f}}<extra></extra>",
            )
            for losses, name in ((first, "first"), (second, "second"))
        ]
    )
    fig.update_xaxes(title={"text": "position in the copy"})
    fig.update_yaxes(title={"text": "loss (nats)"}, rangemode="tozero")
    fig.update_layout(
        title={"text": "Per-token loss: first copy vs second copy", "font": {"size": 14}},
        height=360,
        legend={"orientation": "h", "y": 1.12},
        margin={"l": 10, "r": 10, "t": 70, "b": 10},
    )
    return safe(fig)

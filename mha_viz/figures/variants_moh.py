"""Figures for the training-free mixture of heads (studies/moh.py): which heads each token keeps in one layer, and
the whole-model change against k, routed per token beside static pruning."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import safe


def usage_map(usage: np.ndarray, tokens: Sequence[str], title: str) -> go.Figure:
    """Tokens (rows) × heads (columns), filled where the token keeps the head. Shapes: usage [q_pos, h] bool."""
    q, h = usage.shape
    rows = [f"{i}: {t}" for i, t in enumerate(tokens)]
    fig = go.Figure(
        go.Heatmap(
            z=usage.astype(float), x=[f"h{j}" for j in range(h)], y=rows, zmin=0, zmax=1, showscale=False,
            colorscale=[[0, "rgb(245,245,245)"], [1, "rgb(30,90,170)"]], xgap=1, ygap=1,
            hovertemplate="%{y}, %{x}: %{z:.0f} (1 kept)<extra></extra>",
        )
    )  # fmt: skip
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        xaxis={"side": "top", "tickfont": {"size": 12}},
        yaxis={"autorange": "reversed", "tickfont": {"size": 12}, "type": "category"},
        height=max(260, 22 * q + 120),
        margin={"l": 10, "r": 10, "t": 80, "b": 10},
    )
    return safe(fig)


def moh_figure(ks: np.ndarray, routed: np.ndarray, static: np.ndarray, measure: str, n_layers: int) -> go.Figure:
    """The whole-model change against k heads per token and layer: routed per token, and static pruning of
    n_layers · (h − k) heads in importance order. Shapes: ks, routed, static [n]."""
    fig = go.Figure(
        [
            go.Scatter(x=ks.tolist(), y=routed.tolist(), mode="lines+markers", name="routed: top-k heads per token",
                       line={"color": "rgb(30,90,170)"}),
            go.Scatter(x=ks.tolist(), y=static.tolist(), mode="lines+markers",
                       name=f"static: {n_layers}·(h − k) heads pruned, importance order",
                       line={"color": "rgb(200,80,60)", "dash": "dash"}),
        ]
    )  # fmt: skip
    fig.update_layout(
        title={"text": "Whole-model output change against heads kept per token and layer", "font": {"size": 14}},
        xaxis={"title": {"text": f"k heads kept per token and layer (of {int(ks[-1])})"}, "dtick": 1},
        yaxis={"title": {"text": measure}},
        height=400,
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
    )
    return safe(fig)

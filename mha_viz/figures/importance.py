"""Figures for head importance: the pruning curve against random orders, and a head's circuit spectra."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha_viz.figures.common import _f32, safe


def pruning_figure(
    share: Sequence[float],
    by_importance: np.ndarray,
    random_runs: np.ndarray,
    measure: str,
    title: str,
) -> go.Figure:
    """The measure against the share of heads removed. Shapes: by_importance [k]; random_runs [r, k]."""
    x = _f32(np.asarray(share, dtype=np.float64) * 100)
    lo, hi, mean = random_runs.min(0), random_runs.max(0), random_runs.mean(0)
    fig = go.Figure(
        [
            go.Scatter(x=x, y=_f32(hi), mode="lines", line={"width": 0}, hoverinfo="skip", showlegend=False),
            go.Scatter(
                x=x, y=_f32(lo), mode="lines", line={"width": 0}, fill="tonexty", fillcolor="rgba(200,80,60,0.18)",
                name=f"random orders: range of {random_runs.shape[0]}", hoverinfo="skip",
            ),
            go.Scatter(
                x=x, y=_f32(mean), mode="lines", line={"color": "rgb(200,80,60)", "dash": "dash"},
                name="random order (mean)", hovertemplate="%{x:.0f}% removed: %{y:.4f}<extra>random</extra>",
            ),
            go.Scatter(
                x=x, y=_f32(by_importance), mode="lines+markers", marker={"size": 4}, line={"color": "rgb(30,90,170)"},
                name="least important first", hovertemplate="%{x:.0f}% removed: %{y:.4f}<extra>by importance</extra>",
            ),
        ]
    )  # fmt: skip
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        xaxis={"title": {"text": "heads removed (%)"}, "range": [0, 100]},
        yaxis={"title": {"text": measure}},
        height=420,
        legend={"orientation": "h", "y": -0.2},
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
    )
    return safe(fig)


def spectra(qk: np.ndarray | None, ov: np.ndarray | None, title: str) -> go.Figure:
    """The singular values of a head's QK and OV circuits, side by side (a missing one says why not)."""
    names = ["QK circuit W_Q·W_Kᵀ: where to look", "OV circuit W_V·W_O: what is moved"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=names)
    for j, values in enumerate((qk, ov)):
        if values is None:
            fig.add_annotation(
                text="not a fixed matrix here", showarrow=False, row=1, col=j + 1, x=0.5, y=0.5,
                xref=f"x{j + 1 if j else ''} domain", yref=f"y{j + 1 if j else ''} domain",
            )  # fmt: skip
            continue
        fig.add_trace(
            go.Bar(
                x=np.arange(1, len(values) + 1),
                y=_f32(values),
                hovertemplate="σ%{x}: %{y:.4g}<extra></extra>",
                marker={"color": "rgb(30,90,170)" if j == 0 else "rgb(40,140,90)"},
            ),
            row=1,
            col=j + 1,
        )
    fig.update_xaxes(title={"text": "singular value #"})
    fig.update_layout(title={"text": title, "font": {"size": 14}}, showlegend=False, height=340)
    return safe(fig)

"""Plotly figures from traces: the only module that imports plotly (no Streamlit here)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

HOVER = "%{y} → %{x}: %{z:.3f}<extra>head %{meta}</extra>"


def heads_grid(
    pattern: np.ndarray, tokens: Sequence[str], title: str = "", cols: int = 4, heads: Sequence[int] | None = None
) -> go.Figure:
    """One heatmap per head on a shared colour scale: query tokens on y (top to bottom), keys on x.

    Shapes: pattern [n_heads, query_pos, key_pos]; tokens [pos] distinct labels.
    """
    h = int(pattern.shape[0])
    names = list(range(h)) if heads is None else list(heads)
    cols = max(1, min(cols, h))
    rows = math.ceil(h / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[f"head {i}" for i in names],
        horizontal_spacing=0.04,
        vertical_spacing=0.08 if rows > 1 else 0.0,
    )
    labels = list(tokens)
    z = np.asarray(pattern, dtype=np.float32)  # typed arrays: compact, fast to serialise
    for i in range(h):
        fig.add_trace(
            go.Heatmap(z=z[i], x=labels, y=labels, coloraxis="coloraxis", hovertemplate=HOVER, meta=names[i]),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_yaxes(autorange="reversed", showticklabels=True, tickfont={"size": 9})
    fig.update_xaxes(tickangle=-60, tickfont={"size": 9})
    fig.update_layout(
        title=title or None,
        coloraxis={"colorscale": "Viridis", "cmin": 0.0, "cmax": float(z.max()) if z.size else 1.0},
        coloraxis_colorbar={"title": {"text": "weight"}},
        height=max(320, 300 * rows),
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
    )
    return fig

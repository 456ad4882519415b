"""The logit lens as a figure: layer × position, each cell the top next-token guess and its probability."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import SEQUENTIAL, _f32, safe


def logit_lens(probs: np.ndarray, positions: Sequence[str], guesses: Sequence[Sequence[str]]) -> go.Figure:
    """Rows are layers, columns positions; the text is the top guess after that layer, the colour its
    probability. Token text is escaped like every other label. Shapes: probs [L, n]; guesses [L][n]."""
    n_layers = probs.shape[0]
    fig = go.Figure(
        go.Heatmap(
            z=_f32(probs), x=list(positions), y=[f"L{la}" for la in range(n_layers)],
            text=[list(row) for row in guesses], texttemplate="%{text}",
            colorscale=SEQUENTIAL, zmin=0.0, zmax=1.0, colorbar={"title": "p"},
            hovertemplate="after %{y}, at “%{x}”: next = %{text} (p = %{z:.3f})<extra></extra>",
        )
    )  # fmt: skip
    fig.update_xaxes(type="category", tickangle=-60, title="position (the next token after it is guessed)")
    fig.update_yaxes(type="category", autorange="reversed", title="residual stream after layer")
    fig.update_layout(
        title={"text": "Logit lens: the top next-token guess after each layer", "font": {"size": 14}},
        height=int(min(900, max(320, 22 * n_layers + 160))), margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )  # fmt: skip
    return safe(fig)

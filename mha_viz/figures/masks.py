"""The padding demo's figure: one head's pattern inside a padded batch, padded query rows shaded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.heatmap import HALF_ROW_TITLE_CHARS, matrix_heatmap

PAD_ROW_NOTE = "[PAD] query — its row is not used"


def padded_pattern(pattern: np.ndarray, labels: Sequence[str], real: int, title: str) -> go.Figure:
    """A head's weights in a padded batch; the rows of padded queries (from ``real`` on) are shaded and labelled.

    Shapes: pattern [n, n] (query × key); labels [n] (distinct; padding included)."""
    n = len(labels)
    fig = matrix_heatmap(pattern, labels, labels, title, value_name="weight", attention=True,
                         title_chars=HALF_ROW_TITLE_CHARS)  # fmt: skip  # drawn two to a row
    if real < n:  # categorical axes: row i spans i - 0.5 .. i + 0.5
        fig.add_shape(
            type="rect", xref="paper", x0=0, x1=1, yref="y", y0=real - 0.5, y1=n - 0.5,
            fillcolor="rgba(128,128,128,0.55)", line={"width": 0}, layer="above",
        )  # fmt: skip
        fig.add_annotation(
            text=PAD_ROW_NOTE, xref="paper", x=0.5, yref="y", y=(real + n - 1) / 2, showarrow=False,
            font={"color": "white", "size": 13}, bgcolor="rgba(60,60,60,0.8)",
        )  # fmt: skip
    return fig

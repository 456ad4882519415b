"""Why does this head look there? (issue 37): the largest query-source × key-source terms of a head's score as a
heatmap, and each side's totals as bars (analysis/why_plan.py chose them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha_viz.figures.common import DIVERGING, _f32, safe

TERM_HOVER = "query source %{y} × key source %{x}: %{z:+.4f}<extra></extra>"


def why_heatmap(rows: Sequence[str], cols: Sequence[str], m: np.ndarray, title: str, unit: str) -> go.Figure:
    """The terms ``m`` [rows, cols] (query sources down, key sources across), 0 white, signed colours, each cell's
    value written in it when there are few. ``unit`` names what the terms add up to (the score, the contrast)."""
    peak = float(np.abs(m).max()) if m.size else 1.0
    few = m.size <= 400
    fig = go.Figure(
        go.Heatmap(
            z=_f32(m),
            x=list(cols),
            y=list(rows),
            colorscale=DIVERGING,
            zmid=0.0,
            zmin=-peak,
            zmax=peak,
            hovertemplate=TERM_HOVER,
            colorbar={"title": {"text": unit, "side": "right"}},
            text=np.vectorize(lambda v: f"{v:+.2f}")(m).tolist() if few else None,
            texttemplate="%{text}" if few else None,
            textfont={"size": 11},
        )
    )
    fig.update_xaxes(type="category", tickangle=-45, side="bottom", title_text="key source (in the key token)")
    fig.update_yaxes(type="category", autorange="reversed", title_text="query source (in the query token)")
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=max(380, 150 + 28 * len(rows)),
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
    )
    return safe(fig)


def why_bars(q_totals: Mapping[str, float], k_totals: Mapping[str, float], q_label: str, k_label: str) -> go.Figure:
    """Each side's totals: what each query source brings to the score (over every key source), and each key source
    (over every query source), as two bar charts side by side, largest |total| first."""
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.18,
        subplot_titles=(f"query side: sources in “{q_label}”", f"key side: sources in “{k_label}”"),
    )  # fmt: skip
    for col, totals in ((1, q_totals), (2, k_totals)):
        names = list(totals)
        values = np.array([totals[n] for n in names], dtype=float)
        order = np.argsort(-np.abs(values), kind="stable")
        fig.add_trace(
            go.Bar(
                x=_f32(values[order]),
                y=[names[i] for i in order],
                orientation="h",
                showlegend=False,
                marker={"color": ["#b2182b" if v > 0 else "#2166ac" for v in values[order]]},
                hovertemplate="%{y}: %{x:+.4f}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(type="category", autorange="reversed", row=1, col=col)
        fig.update_xaxes(tickangle=0, zeroline=True, zerolinecolor="#888", row=1, col=col)
    fig.update_layout(height=max(300, 120 + 22 * max(len(q_totals), len(k_totals))),
                      margin={"l": 10, "r": 10, "t": 50, "b": 10})  # fmt: skip
    return safe(fig)

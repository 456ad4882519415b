"""Bar and line charts: one token's weights per head, per-head and per-token figures, two series side by side."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from mha_viz.figures.common import SEQUENTIAL, _f32, _grid, safe
from mha_viz.figures.look import COLORWAY, INK

FOCUS_TOP_KEYS = 24  # beyond this many tokens, each head's bars show its largest weights only


def weight_colours(weights: np.ndarray) -> list[str]:
    """Each weight's colour on the sequential scale from 0 to 1 (as the heatmaps colour it). Shapes: [k] -> k."""
    return sample_colorscale(SEQUENTIAL, np.clip(np.asarray(weights, dtype=np.float64), 0.0, 1.0).tolist())


def focus_bars(
    pattern: np.ndarray, tokens: Sequence[str], query: int, cols: int = 4, query_label: str | None = None
) -> go.Figure:
    """For one query token, a bar chart per head of the weight it puts on each key token.

    With more than FOCUS_TOP_KEYS tokens, each head shows its FOCUS_TOP_KEYS largest weights (in
    text order), so the bars stay readable and quick to draw. Shapes: pattern [n_heads, query_pos, key_pos];
    tokens [key_pos] (the key labels); ``query_label`` defaults to tokens[query] (self-attention).
    """
    h, n = int(pattern.shape[0]), len(tokens)
    rows, cols = _grid(h, cols)
    top = n > FOCUS_TOP_KEYS
    titles = [f"head {i}" for i in range(h)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, shared_yaxes=True, shared_xaxes=not top)
    labels = list(tokens)
    qlabel = labels[query] if query_label is None else query_label
    for i in range(h):
        w = _f32(pattern[i, query])
        keys = np.sort(np.argsort(-w, kind="stable")[:FOCUS_TOP_KEYS]) if top else np.arange(n)
        fig.add_trace(
            go.Bar(
                x=[labels[k] for k in keys],
                y=w[keys],
                marker={"color": weight_colours(w[keys])},  # rgb strings: numbers made Plotly warn per bar
                hovertemplate=f"%{{meta}} → %{{x}}: %{{y:.3f}}<extra>head {i}</extra>",
                meta=qlabel,
                showlegend=False,
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_xaxes(type="category", tickangle=-60, tickfont={"size": 9})
    peak = float(np.max(pattern[:, query])) if pattern.size else 1.0  # long texts spread thin: fit the axis
    fig.update_yaxes(range=[0, 1.0 if peak > 0.5 else max(0.02, 1.15 * peak)])
    fig.update_layout(
        title={
            "text": f"Where “{qlabel}” attends, head by head"
            + (f" (each head's {FOCUS_TOP_KEYS} largest weights)" if top else ""),
            "font": {"size": 14},
        },
        height=max(300, 230 * rows + 80),
        margin={"l": 10, "r": 10, "t": 70, "b": 10},
    )
    return safe(fig)


def head_bars(values: dict[str, np.ndarray], names: Sequence[str], title: str) -> go.Figure:
    """Grouped bars of a few per-head figures (e.g. entropy and attention to self)."""
    fig = make_subplots(rows=1, cols=len(values), subplot_titles=list(values))
    for j, (label, v) in enumerate(values.items()):
        fig.add_trace(
            go.Bar(x=list(names), y=_f32(v), hovertemplate=f"%{{x}}: %{{y:.3f}}<extra>{label}</extra>"),
            row=1,
            col=j + 1,
        )
    fig.update_xaxes(type="category")
    fig.update_layout(title={"text": title, "font": {"size": 14}}, showlegend=False, height=320)
    return safe(fig)


def line_chart(x: Sequence[float], series: dict[str, Sequence[float]], title: str, x_title: str) -> go.Figure:
    """One small line chart per series, sharing the x axis (e.g. figures across head counts)."""
    fig = make_subplots(rows=1, cols=len(series), subplot_titles=list(series))
    xs = [str(v) for v in x]
    for j, (label, ys) in enumerate(series.items()):
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=_f32(np.asarray(ys)),
                mode="lines+markers",
                hovertemplate=f"{x_title} %{{x}}: %{{y:.3f}}<extra>{label}</extra>",
            ),
            row=1,
            col=j + 1,
        )
    fig.update_xaxes(type="category", title={"text": x_title})
    fig.update_layout(title={"text": title, "font": {"size": 14}}, showlegend=False, height=330)
    return safe(fig)


def token_bars(tokens: Sequence[str], series: dict[str, np.ndarray], title: str) -> go.Figure:
    """Per-token bars, one panel per series (e.g. relative output change and cosine)."""
    fig = make_subplots(rows=len(series), cols=1, subplot_titles=list(series), shared_xaxes=True)
    for j, (label, v) in enumerate(series.items()):
        fig.add_trace(
            go.Bar(x=list(tokens), y=_f32(v), hovertemplate=f"%{{x}}: %{{y:.4f}}<extra>{label}</extra>"),
            row=j + 1,
            col=1,
        )
    fig.update_xaxes(type="category", tickangle=-60)
    fig.update_layout(title={"text": title, "font": {"size": 14}}, showlegend=False, height=200 * len(series) + 120)
    return safe(fig)


PAIRED_ROW_PX = 380  # px: one panel of paired_bars_rows, as one paired_bars chart was tall
FLAT_TICKS = 6  # a panel with at most this many categories keeps its labels level (they have room)


def paired_bars_rows(
    panels: Sequence[tuple[Sequence[str], np.ndarray, np.ndarray, str]], names: tuple[str, str]
) -> go.Figure:
    """Several paired_bars charts as ONE chart of stacked panels, each with its own categories and title, one legend
    (Two sentences drew two such charts: Streamlit draws every chart twice, so a tab switch's browser time grows with
    its charts, issue 36 §6). ``panels``: (keys, first series, second series, title) each. Shapes: a, b [len(keys)]."""
    fig = make_subplots(rows=len(panels), cols=1, subplot_titles=[p[3] for p in panels], vertical_spacing=0.22)
    colours = COLORWAY[:2]  # the same two colours in every panel
    for row, (keys, a, b, _) in enumerate(panels, start=1):
        for v, name, colour in ((a, names[0], colours[0]), (b, names[1], colours[1])):
            fig.add_trace(go.Bar(x=list(keys), y=_f32(v), name=name, legendgroup=name, showlegend=row == 1,
                                 marker={"color": colour},
                                 hovertemplate=f"%{{x}}: %{{y:.3f}}<extra>{name}</extra>"), row=row, col=1)  # fmt: skip
        fig.update_xaxes(type="category", tickangle=0 if len(keys) <= FLAT_TICKS else -60, row=row, col=1)
    fig.update_annotations(font={"size": 14, "color": INK, "weight": 700}, xanchor="left", x=0.0)  # panel titles
    fig.update_layout(barmode="group", height=PAIRED_ROW_PX * len(panels), legend={"orientation": "h", "y": 1.08})
    return safe(fig)


def paired_bars(keys: Sequence[str], a: np.ndarray, b: np.ndarray, names: tuple[str, str], title: str) -> go.Figure:
    """Two series side by side per key (e.g. one token's attention in two sentences)."""
    fig = go.Figure(
        [
            go.Bar(x=list(keys), y=_f32(v), name=name, hovertemplate=f"%{{x}}: %{{y:.3f}}<extra>{name}</extra>")
            for v, name in ((a, names[0]), (b, names[1]))
        ]
    )
    fig.update_xaxes(type="category", tickangle=-60)
    fig.update_layout(
        barmode="group", title={"text": title, "font": {"size": 14}}, height=380, legend={"orientation": "h", "y": 1.1}
    )
    return safe(fig)

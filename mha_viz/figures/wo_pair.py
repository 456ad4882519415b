"""The W^O tab's charts, fewer of them: the layer's W^O and the W^O a what-if swaps in as ONE chart of two panels
(wo_pair), and the output change per token with each head's contribution per token as ONE chart of three rows on
the same token axis (change_and_contributions).

Drawn apart they were four of the tab's five charts (issue 36 §6: Streamlit draws every chart twice, so a tab
switch's browser time grows with its charts). In wo_pair each panel is figures.lesson.wo_heatmap's figure as it
was: the same cells (block means where W^O is larger than MAX_WO_CELLS a side, every entry otherwise), its own colour
scale, hover, head bands and title; figures.heatmap.matrix_pair puts them side by side (titles above the panels,
each colour bar above its panel, one set of row labels: both panels' rows are the same concat dimension).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha_viz.figures.common import SEQUENTIAL, _f32, safe
from mha_viz.figures.heatmap import matrix_pair
from mha_viz.figures.lesson import wo_heatmap

WO_PAIR = "W^O pair"  # layout.meta of the pair (a reader finds the panels by it)


def wo_pair(
    left: np.ndarray, right: np.ndarray, titles: tuple[str, str], title_chars: int | None = None
) -> tuple[go.Figure, str]:
    """Two W^O matrices (wo_heatmap each) side by side in one figure, and the pooling note ("" when every entry is
    drawn; said once when both panels are pooled alike). Shapes: left, right [h, d_head, d_model] (the same)."""
    figs, notes = zip(*(wo_heatmap(w, t, title_chars=title_chars) for w, t in zip((left, right), titles, strict=True)),
                      strict=True)  # fmt: skip
    pair = matrix_pair(*figs)
    shapes = []
    for fig, ax in zip(figs, ("", "2"), strict=True):  # each panel's lines between heads, on its own axes
        for s in fig.layout.shapes:
            s = s.to_plotly_json()
            shapes.append(s | {"xref": f"x{ax} domain", "yref": f"y{ax}"})
    pair.update_layout(shapes=shapes, meta=WO_PAIR)
    note = " ".join(dict.fromkeys(n for n in notes if n))
    return pair, note


BAR_ROW_PX = 180  # each bar row's height
HEAD_ROW_PX = 20  # each head's row in the contributions map (at least 160 px in all)


def change_and_contributions(
    tokens: Sequence[str],
    change: dict[str, np.ndarray],
    norms: np.ndarray,
    heads: Sequence[str],
    titles: tuple[str, str],
) -> go.Figure:
    """One chart on one token axis: a bar row per series of ``change`` (figures.bars.token_bars' rows: the relative
    output change, the cosine), then the heads' contribution norms per token as a heatmap (matrix_heatmap's cells,
    hover and colours). ``titles``: the bars' title (the chart's) and the map's (its row's). Shapes: each series
    [n]; norms [h, n]; tokens [n]; heads [h]."""
    names = list(change)
    map_px = max(160, HEAD_ROW_PX * len(heads))
    fig = make_subplots(
        rows=len(names) + 1, cols=1, shared_xaxes=True, vertical_spacing=0.06,
        subplot_titles=[*names, titles[1]], row_heights=[BAR_ROW_PX] * len(names) + [map_px],
    )  # fmt: skip
    for j, (label, v) in enumerate(change.items()):
        fig.add_trace(
            go.Bar(x=list(tokens), y=_f32(v), hovertemplate=f"%{{x}}: %{{y:.4f}}<extra>{label}</extra>"),
            row=j + 1,
            col=1,
        )
    bottom = len(names) + 1
    fig.add_trace(
        go.Heatmap(
            z=_f32(norms), x=list(tokens), y=list(heads), colorscale=SEQUENTIAL, name="norm",
            hovertemplate="row %{y}, column %{x}: %{z:.4f}<extra>norm</extra>",
        ),
        row=bottom,
        col=1,
    )  # fmt: skip
    height = BAR_ROW_PX * len(names) + map_px + 200
    row_domain = fig.layout[f"yaxis{bottom}"].domain
    fig.update_traces(
        colorbar={"title": {"text": "norm"}, "y": sum(row_domain) / 2, "len": row_domain[1] - row_domain[0]},
        selector={"type": "heatmap"},
    )
    fig.update_xaxes(type="category", tickangle=-60)
    fig.update_yaxes(autorange="reversed", row=bottom, col=1)
    fig.update_layout(title={"text": titles[0], "font": {"size": 14}}, showlegend=False, height=height)
    return safe(fig)

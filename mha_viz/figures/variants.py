"""Figures for shared keys and values (MHA → GQA → MQA): the output change against the KV cache, one curve per
grouping, and one layer's heads before and after the conversion (mha_viz/studies/variants.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import safe
from mha_viz.figures.grids import heads_grid

COLOURS = ("rgb(30,90,170)", "rgb(200,80,60)", "rgb(60,150,80)", "rgb(140,90,170)")


def cache_curve(
    curves: Mapping[str, tuple[Sequence[int], Sequence[float], Sequence[float]]],
    own: tuple[int, float],
    measure: str,
    title: str,
    x_title: str,
) -> go.Figure:
    """The output change against the KV cache size: ``curves`` {grouping: (kv_heads, cache MiB, change)}, the
    model's own point ``own`` (kv_heads, cache MiB) marked."""
    traces = []
    for i, (name, (heads, mib, change)) in enumerate(curves.items()):
        traces.append(
            go.Scatter(
                x=[float(m) for m in mib], y=[float(c) for c in change], mode="lines+markers", name=name,
                line={"color": COLOURS[i % len(COLOURS)], "dash": "solid" if i == 0 else "dash"},
                marker={"size": 8 if i == 0 else 6}, text=[f"{h} K/V heads" for h in heads],
                hovertemplate="%{text}: %{x:,.1f} MiB, change %{y:.4g}<extra>" + name + "</extra>",
            )
        )  # fmt: skip
    heads, mib = own
    traces.append(
        go.Scatter(
            x=[float(mib)], y=[0.0], mode="markers+text", name=f"this model ({heads} K/V heads)",
            marker={"size": 16, "symbol": "star", "color": "rgb(240,170,20)", "line": {"width": 1, "color": "black"}},
            text=["this model"], textposition="top left", hovertemplate="this model: %{x:,.1f} MiB<extra></extra>",
        )
    )  # fmt: skip
    fig = go.Figure(traces)
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        xaxis={"title": {"text": x_title}, "rangemode": "tozero"},
        yaxis={"title": {"text": measure}},
        height=420,
        legend={"orientation": "h", "y": -0.2},
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
    )
    return safe(fig)


def before_after(
    before: np.ndarray,
    after: np.ndarray,
    distance: np.ndarray,
    tokens: Sequence[str],
    key_tokens: Sequence[str],
    heads: Sequence[int] | None = None,
) -> go.Figure:
    """Each head's pattern before and after the conversion side by side (two heads per row), the distance in the
    title; only ``heads`` (in that order) when given. Shapes: before, after [h, q_pos, k_pos]; distance [h]."""
    shown = list(range(before.shape[0])) if heads is None else [int(i) for i in heads]
    pairs = np.stack([before[shown], after[shown]], 1).reshape(2 * len(shown), *before.shape[1:])  # [2s, q, k]
    titles = [t for i in shown for t in (f"head {i} before", f"head {i} after: JS {distance[i]:.3f}")]
    # not linked: every panel already has the same fixed ranges (issue 36 §6, as in figures.heatmap.matrix_pair)
    return heads_grid(pairs, tokens, titles, cols=4, clickable=False, key_tokens=key_tokens, linked=False)


def energy_figure(curves: Mapping[str, np.ndarray], title: str) -> go.Figure:
    """The share of the energy kept against the share of dimensions kept, one line per matrix; 90 / 95 / 99 % marked.
    Shapes: each curve [r] (collab.energy_curve), drawn over 1/r … 100 %."""
    traces = []
    for i, (name, curve) in enumerate(curves.items()):
        r = len(curve)
        x = np.arange(1, r + 1) / r * 100
        traces.append(
            go.Scatter(
                x=x.astype(np.float32), y=(np.asarray(curve) * 100).astype(np.float32), mode="lines", name=name,
                line={"color": COLOURS[i % len(COLOURS)]}, customdata=np.arange(1, r + 1),
                hovertemplate="%{customdata} of " + str(r) + " dimensions: %{y:.1f}% of the energy<extra></extra>",
            )
        )  # fmt: skip
    fig = go.Figure(traces)
    for level in (90, 95, 99):
        fig.add_hline(y=level, line={"width": 1, "dash": "dot", "color": "grey"})
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        xaxis={"title": {"text": "dimensions kept (% of the matrix's width)"}, "range": [0, 100]},
        yaxis={"title": {"text": "energy kept (% of Σσ²)"}, "range": [0, 100.5]},
        height=400,
        legend={"orientation": "h", "y": -0.22},
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
    )
    return safe(fig)

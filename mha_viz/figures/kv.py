"""Figures for the KV cache lens (studies/kv_lens.py): per K/V head a strip of kept and evicted keys over the prefix,
a layer × head map (lost attention mass, or the loss each head's evictions cause), and the budget-versus-quality
curve of every policy (cache bytes against loss change) with the chosen point marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import category_ticks, safe, style_layer_head_map

KEPT_COLOURS = [[0.0, "rgb(235,235,235)"], [0.5, "rgb(235,235,235)"], [0.5, "rgb(30,90,170)"], [1.0, "rgb(30,90,170)"]]
POLICY_COLOURS = ("rgb(30,90,170)", "rgb(200,80,60)", "rgb(60,150,80)", "rgb(140,90,170)", "rgb(230,150,30)",
                  "rgb(90,170,190)", "rgb(120,120,120)")  # fmt: skip
POLICY_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")  # lines that coincide stay visible
POLICY_SYMBOLS = ("circle", "square", "triangle-up", "triangle-down", "x", "cross")
STRIP_PX = 6  # height of one head's strip
TICK_CHARS = 14  # a strip's key label is cut to this many characters (a run of spaces ran off the plot; hover: all)
OFF_SCALE = 3.0  # a sharing point more than this many eviction spans above them is drawn at the top edge, labelled


def keep_strips(keep: np.ndarray, labels: Sequence[str], title: str) -> go.Figure:
    """Every layer's K/V heads as rows (L0 kv0, L0 kv1, …), the prefix's tokens as columns: blue kept, grey
    evicted. Shapes: keep [L, kv, P] bool; labels [P]."""
    L, kv, p = keep.shape
    rows = [f"L{la} kv{j}" for la in range(L) for j in range(kv)]
    x = [f"{i}: {t}" for i, t in enumerate(labels)]
    fig = go.Figure(
        go.Heatmap(
            z=keep.reshape(L * kv, p).astype(np.float32), x=x, y=rows, colorscale=KEPT_COLOURS, zmin=0, zmax=1,
            showscale=False, xgap=0, ygap=1 if L * kv <= 60 else 0, meta="1 kept, 0 evicted",
            hovertemplate="%{y}, key %{x}: %{z:.0f}<extra>1 kept, 0 evicted</extra>",
        )
    )  # fmt: skip
    ticks, _ = category_ticks(x, 900, angle=-60)
    ticks["ticktext"] = [t if len(t) <= TICK_CHARS else t[: TICK_CHARS - 1] + "…" for t in ticks["ticktext"]]
    fig.update_xaxes(**ticks, showgrid=False, title={"text": "prefix key (position: token)", "font": {"size": 12}})
    every = max(1, L // 30)  # one label per layer (its first K/V head's row), the hover names each row
    fig.update_yaxes(autorange="reversed", tickvals=rows[:: kv * every], showgrid=False, tickfont={"size": 10},
                     ticktext=[f"L{la}" for la in range(0, L, every)],
                     title={"text": f"layer ({kv} K/V head rows each)", "font": {"size": 12}})  # fmt: skip
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=int(min(1400, max(260, STRIP_PX * L * kv + 150))),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return safe(fig)


def head_map(values: np.ndarray, title: str, value_name: str, head_word: str = "H") -> go.Figure:
    """A layer × head map of ``values`` (lost mass per query head, or nats per K/V head). Shapes: [L, H]."""
    L, H = values.shape
    z = np.asarray(values, dtype=np.float32)  # [L, H]
    signed = bool((z < 0).any())  # a signed map (nats) is diverging around 0: a reader sees which heads help or hurt
    scale = (
        {"colorscale": "RdBu", "reversescale": True, "zmid": 0.0} if signed else {"colorscale": "Viridis", "zmin": 0}
    )
    fig = go.Figure(
        go.Heatmap(
            z=z, **scale, colorbar={"title": {"text": value_name}},
            hovertemplate="layer %{y}, " + head_word + " %{x}: %{z:.4f}<extra></extra>",
        )
    )  # fmt: skip
    style_layer_head_map(fig, L, H, title)
    word = "K/V head" if head_word == "kv" else "query head"
    fig.update_xaxes(ticktext=[f"{head_word}{h}" for h in range(H)], title={"text": word, "font": {"size": 12}})
    fig.update_yaxes(title={"text": "layer", "font": {"size": 12}})
    return safe(fig)


def budget_curve(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]],
    shares: Sequence[tuple[str, float, float]],
    chosen: tuple[str, float, float],
    full_mib: float,
) -> go.Figure:
    """Loss change against cache MiB: ``curves`` {policy name: (budgets, MiB, loss change)}, ``shares`` (name, MiB,
    loss change) of K/V sharing, ``chosen`` (name, MiB, loss change) marked with a star; the full cache at 0."""
    traces = []
    for i, (name, (budgets, mib, change)) in enumerate(curves.items()):
        traces.append(
            go.Scatter(
                x=[float(m) for m in mib], y=[float(c) for c in change], mode="lines+markers", name=name,
                line={"color": POLICY_COLOURS[i % len(POLICY_COLOURS)], "dash": POLICY_DASHES[i % 6]},
                marker={"symbol": POLICY_SYMBOLS[i % 6], "size": 8}, text=[f"{b:.0%}" for b in budgets],
                hovertemplate="budget %{text}: %{x:.3g} MiB, Δ loss %{y:+.4f}<extra>%{meta}</extra>", meta=name,
            )
        )  # fmt: skip
    ys = [0.0, float(chosen[2])] + [float(c) for _, _, change in curves.values() for c in change]
    lo, hi = min(ys), max(ys)
    pad = 0.08 * (hi - lo) or 0.05
    top = hi + 2 * pad  # where a sharing point far above the evictions is drawn (its true value in text and hover)
    off = [float(c) > hi + OFF_SCALE * max(hi - lo, pad) for _, _, c in shares]
    for (name, mib, change), far in zip(shares, off, strict=True):
        traces.append(
            go.Scatter(
                x=[float(mib)], y=[top if far else float(change)], mode="markers+text" if far else "markers",
                name=name, meta=name, customdata=[float(change)], cliponaxis=False,
                text=[f"{float(change):+.2f} nats, off the scale ↑"] if far else None, textposition="middle right",
                marker={"size": 11, "symbol": "triangle-up" if far else "diamond", "color": "rgb(60,60,60)"},
                hovertemplate="%{x:.3g} MiB, Δ loss %{customdata:+.4f}<extra>%{meta}</extra>",
            )
        )  # fmt: skip
    traces.append(
        go.Scatter(
            x=[float(full_mib)], y=[0.0], mode="markers", name="full cache",
            marker={"size": 10, "symbol": "circle-open", "color": "black"},
            hovertemplate="full cache: %{x:.3g} MiB<extra></extra>",
        )
    )  # fmt: skip
    name, mib, change = chosen
    traces.append(
        go.Scatter(
            x=[float(mib)], y=[float(change)], mode="markers", name=f"chosen: {name}", meta=name,
            marker={"size": 15, "symbol": "star", "color": "rgb(240,170,20)", "line": {"width": 1, "color": "black"}},
            hovertemplate="chosen: %{x:.3g} MiB, Δ loss %{y:+.4f}<extra>%{meta}</extra>",
        )
    )  # fmt: skip
    fig = go.Figure(traces)
    fig.update_layout(
        title={"text": "Cache size against the change of the loss on the continuation", "font": {"size": 14}},
        xaxis={"title": {"text": "KV cache of the prefix (MiB, float32)"}, "rangemode": "tozero"},
        yaxis={
            "title": {"text": "Δ loss on the continuation (nats)"},
            **({"range": [lo - pad, top + pad]} if any(off) else {}),
        },
        height=460,
        legend={"orientation": "h", "y": -0.2},
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
    )
    return safe(fig)

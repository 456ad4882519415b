"""The heads that matter at length as three layer × head maps side by side (issue 38 §4): each head's sink share,
local share and retrieval score (Wu et al. 2024), the top-k retrieval heads outlined on every map, each cell's
hover naming its layer, head, value, DuoAttention kind and MInference pattern. Numbers in, a figure out: the
study (studies/long_heads.py) or its CSV (`mha-viz long`) computed them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha_viz.config import LONG_LOCAL_TOKENS, LONG_SINK_TOKENS
from mha_viz.figures.common import _esc_seq, _f32
from mha_viz.trace import MhaVizError

TOP_NAME = "top-{k} retrieval heads (the ones masked)"  # the outline trace's name (one per map, one in the legend)
MARK = "#D62728"  # the outline colour: red on the sequential scale's white-to-blue
RETRIEVAL_SCALE_MIN = 0.05  # the retrieval map's colour scale ends at its largest score, at least this
GAP = 0.06  # horizontal room between maps (share of the width)


def panel_titles(sinks: int = LONG_SINK_TOKENS, w: int = LONG_LOCAL_TOKENS) -> tuple[str, str, str]:
    """What each map's number is, as the maps' titles say it."""
    return (
        f"sink share: weight on the first {sinks} tokens",
        f"local share: weight within the last {w} tokens",
        "retrieval score (Wu et al. 2024): share of<br>needle tokens copied by the head's top attention",
    )


def top_heads(retrieval: np.ndarray, k: int) -> list[tuple[int, int]]:
    """The k heads with the highest retrieval score, ties in (layer, head) order, as the study masks them.
    Shapes: retrieval [L, H]."""
    n_heads = retrieval.shape[1]
    order = np.argsort(-np.asarray(retrieval), axis=None, kind="stable")[:k]
    return [(int(i // n_heads), int(i % n_heads)) for i in order]


def _title(recall: Mapping[str, float] | None, tokens: int | None, k: int) -> str:
    size = f" on {tokens:,} tokens" if tokens else ""
    if recall is None:
        said = "needle recall not in the CSV (run <i>mha-viz long --text-file</i> to measure it)"
    else:
        names = {"none": "no head masked", "top-k retrieval": f"top-{k} retrieval masked", "k random": f"{k} random"}
        said = "needle recall: " + " · ".join(f"{names.get(n, n)} {v:.0%}" for n, v in recall.items())
    return f"The heads that matter at length{size}<br><sup>{said}</sup>"


def long_heads_maps(
    sink: np.ndarray, local: np.ndarray, retrieval: np.ndarray, kinds: np.ndarray, patterns: np.ndarray,
    recall: Mapping[str, float] | None = None, k: int = 8, tokens: int | None = None,
) -> go.Figure:  # fmt: skip
    """Three heatmaps (sink share, local share, retrieval score), layer 0 at the top, heads across; the top-k
    retrieval heads outlined on each; the needle recalls in the title when given (a CSV holds none).
    Shapes: sink, local, retrieval [L, H] in 0…1; kinds, patterns [L, H] str."""
    maps = [np.asarray(m, dtype=np.float64) for m in (sink, local, retrieval)]  # 3 × [L, H]
    shape = maps[0].shape
    if len(shape) != 2 or 0 in shape or any(m.shape != shape for m in maps[1:]):
        raise MhaVizError(f"the maps need one [layers, heads] grid each; got {[m.shape for m in maps]}")
    if np.shape(kinds) != shape or np.shape(patterns) != shape:
        raise MhaVizError("kinds and patterns need one entry per head")
    if not all(np.isfinite(m).all() for m in maps):
        raise MhaVizError("a sink, local or retrieval value is not a finite number")
    n_layers, n_heads = shape
    k = max(1, min(k, n_layers * n_heads))
    text = np.stack([np.asarray(kinds, dtype=object), np.asarray(patterns, dtype=object)], axis=-1)  # [L, H, 2]
    custom = _esc_seq(text.tolist())  # user text (a CSV's cells) shown as typed
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=GAP, subplot_titles=panel_titles())
    names = ("sink share", "local share", "retrieval score")
    top_r = max(RETRIEVAL_SCALE_MIN, float(maps[2].max()))  # the retrieval scale ends at its largest score
    scored = np.where(maps[2] > 0, np.char.mod("%.2f", maps[2]), "")  # [L, H]: scores written in their cells
    for col, (m, name) in enumerate(zip(maps, names, strict=True), start=1):
        last = col == 3
        bar = {"orientation": "h", "y": -0.09, "yanchor": "top", "thickness": 12,
               "x": 0.835 if last else 0.33, "len": 0.3 if last else 0.62,
               "title": {"text": f"retrieval score (0 to {top_r:.2f})" if last else "share of the weight (0 to 1)",
                         "side": "top"}}  # fmt: skip
        fig.add_trace(
            go.Heatmap(
                z=_f32(m), x=list(range(n_heads)), y=list(range(n_layers)), customdata=custom, zmin=0.0,
                zmax=top_r if last else 1.0, colorscale="Purples" if last else "Blues", xgap=1, ygap=1, name=name,
                hovertemplate=f"layer %{{y}}, head %{{x}}<br>{name} %{{z:.3f}}<br>kind %{{customdata[0]}}"
                "<br>MInference pattern %{customdata[1]}<extra></extra>",
                showscale=col != 2, colorbar=bar,
                text=scored.tolist() if last else None, texttemplate="%{text}" if last else None,
                textfont={"size": 10},
            ),
            row=1, col=col,
        )  # fmt: skip
    top = top_heads(maps[2], k)
    cell_px = min(900 / (3 * n_heads), _height(n_layers) / n_layers)
    for col in range(1, 4):
        fig.add_trace(
            go.Scatter(
                x=[h for _, h in top], y=[la for la, _ in top], mode="markers", name=TOP_NAME.format(k=k),
                legendgroup="top", showlegend=col == 1, hoverinfo="skip",
                marker={"symbol": "square-open", "size": max(6, 0.8 * cell_px), "color": MARK,
                        "line": {"width": 2.5, "color": MARK}},
            ),
            row=1, col=col,
        )  # fmt: skip
    ticks = {"tickvals": list(range(n_heads)), "ticktext": [str(h) for h in range(n_heads)], "showgrid": False}
    fig.update_xaxes(title_text="head", zeroline=False, tickangle=0, **ticks)
    fig.update_yaxes(tickvals=list(range(n_layers)), ticktext=[str(la) for la in range(n_layers)],
                     autorange="reversed", showgrid=False, zeroline=False)  # fmt: skip
    fig.update_yaxes(title_text="layer", row=1, col=1)
    for ann in fig.layout.annotations:
        ann.font = {"size": 12}
    fig.update_layout(
        title={"text": _title(recall, tokens, k)}, height=_height(n_layers), width=1200, hovermode="closest",
        margin={"t": 110, "b": 110},
        legend={"orientation": "h", "x": 0.5, "xanchor": "left", "y": 0.965, "yanchor": "top", "yref": "container"},
    )  # fmt: skip
    return fig


def _height(n_layers: int) -> int:
    return int(min(1400, max(380, 22 * n_layers + 220)))

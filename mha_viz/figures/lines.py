"""Token-to-token lines (the picture of bertviz's head view): queries left, keys right, one colour per head.

Each head's lines are drawn as a few scatter traces with NaN separators, one trace per opacity level
(Plotly gives a trace one line colour, so the weight is bucketed into LEVELS alpha steps). Weights under
a threshold are not drawn, at most MAX_SEGMENTS lines are (the largest), and at most MAX_ROWS tokens per
column are shown: a longer text is drawn as a window of tokens. The figure says all of this in its note.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from mha_viz.analysis.opening import layer_opening
from mha_viz.analysis.plans.lines import window
from mha_viz.figures.common import _f32, safe

LINE_THRESHOLD = 0.01  # weights under this are not drawn
LEVELS = 8  # opacity steps: a weight in ((k-1)/8, k/8] is drawn with alpha (k - 0.5)/8
MAX_SEGMENTS = 10_000  # lines per figure; above it only the largest weights are drawn
MAX_ROWS = 80  # tokens per column; a longer text is shown as a window of MAX_ROWS tokens
MAX_LINE_HEADS = 12  # heads drawn at once (more colours would not stay apart)
TOP_HOVER = 3  # hover on a token lists its largest weights, per head
ROW_PX = 18  # height per token row
PALETTE = qualitative.Dark24


@dataclass(frozen=True)
class LineSet:
    """The lines one figure draws. Shapes: head, query, key, weight [m] (query/key index the full pattern)."""

    heads: tuple[int, ...]  # the heads drawn, in order (colours follow this order)
    head: np.ndarray  # [m] int
    query: np.ndarray  # [m] int
    key: np.ndarray  # [m] int
    weight: np.ndarray  # [m] float32, the pattern's own values
    threshold: float  # weights under this were not drawn
    capped: int  # lines at or above the threshold left out because of MAX_SEGMENTS (the smallest ones)
    focus: int | None  # the query whose lines alone are drawn (None: every query in the window)
    q_window: tuple[int, int]  # [start, stop) of the query tokens shown
    k_window: tuple[int, int]
    outside: float  # mean share of the drawn queries' weight that goes to keys outside the key window


def token_window(n: int, centre: int, size: int = MAX_ROWS) -> tuple[int, int]:
    """[start, stop) of at most ``size`` positions out of n, centred on ``centre`` where the ends allow (Lines'
    plan's rule, analysis/plans/lines.py)."""
    return window(n, centre, size)


def strongest_head(pattern: np.ndarray, labels: Sequence[str], key_labels: Sequence[str]) -> int:
    """The head Lines opens on: analysis.opening's rule inside this layer (the head where "it"'s weight on "animal"
    stands out most from the other tokens', as the app and the notebook open), else head 0.

    Shapes: pattern [h, n_q, n_k]; labels [n_q]; key_labels [n_k]."""
    head = layer_opening(pattern, labels, key_labels)
    return 0 if head is None else head


def select_lines(
    pattern: np.ndarray,
    heads: Sequence[int],
    focus: int | None = None,
    windows: tuple[tuple[int, int], tuple[int, int]] | None = None,
    threshold: float = LINE_THRESHOLD,
    max_segments: int = MAX_SEGMENTS,
) -> LineSet:
    """The lines to draw: every weight >= threshold (and > 0) from the shown queries (only ``focus`` when
    given) to the shown keys, in the chosen heads; the ``max_segments`` largest when there are more.

    Shapes: pattern [h, n_q, n_k]; ``windows`` = ((q_start, q_stop), (k_start, k_stop)), default everything.
    """
    p = _f32(pattern)
    nq, nk = int(p.shape[1]), int(p.shape[2])
    (q0, q1), (k0, k1) = windows or ((0, nq), (0, nk))
    heads = tuple(int(h) for h in heads)
    rows = np.arange(q0, q1) if focus is None else np.asarray([focus])
    sub = p[np.ix_(np.asarray(heads, dtype=int), rows, np.arange(k0, k1))]  # [m_heads, rows, keys]
    outside = float(1.0 - sub.sum(-1).mean()) if sub.size else 0.0
    hi, ri, ki = np.nonzero((sub >= threshold) & (sub > 0))
    w = sub[hi, ri, ki]  # [m]
    capped = 0
    if w.size > max_segments:
        keep = np.sort(np.argsort(-w, kind="stable")[:max_segments])
        capped = int(w.size - keep.size)
        hi, ri, ki, w = hi[keep], ri[keep], ki[keep], w[keep]
    return LineSet(
        heads=heads,
        head=np.asarray(heads, dtype=int)[hi] if heads else hi,
        query=rows[ri],
        key=ki + k0,
        weight=w.astype(np.float32),
        threshold=float(threshold),
        capped=capped,
        focus=focus,
        q_window=(q0, q1),
        k_window=(k0, k1),
        outside=max(0.0, outside),
    )


def head_colours(n: int) -> list[str]:
    """n colours as "r,g,b" from the Dark24 palette (distinct up to 24; MAX_LINE_HEADS is less)."""
    return [",".join(str(int(PALETTE[i % len(PALETTE)][j : j + 2], 16)) for j in (1, 3, 5)) for i in range(n)]


def _hover_lines(p: np.ndarray, names: Sequence[str], heads: Sequence[int], axis: int, window: tuple[int, int]
                 ) -> list[list[str]]:  # fmt: skip
    """For each token in the window: one line per head naming its TOP_HOVER largest weights (axis 2: as a
    query, over all keys; axis 1: as a key, over all queries). Shapes: p [h, n_q, n_k] -> [window][heads]."""
    out: list[list[str]] = []
    for i in range(*window):
        row = []
        for h in heads:
            w = p[h, i, :] if axis == 2 else p[h, :, i]
            top = np.argsort(-w, kind="stable")[:TOP_HOVER]
            row.append(f"head {h}: " + " · ".join(f"{names[j]} {w[j]:.3f}" for j in top))
        out.append(row)
    return out


def _token_trace(
    labels: Sequence[str], offset: int, side: str, hover: list[list[str]], focus: int | None
) -> go.Scatter:
    n, m = len(labels), len(hover[0]) if hover else 0
    left = side == "query"
    verb = "attends to" if left else "receives from"
    template = f"<b>%{{text}}</b> ({side}) {verb}:<br>" + "<br>".join(f"%{{customdata[{2 + i}]}}" for i in range(m))
    big = [offset + i == focus for i in range(n)]
    return go.Scatter(
        x=np.full(n, 0.0 if left else 1.0, dtype=np.float32),
        y=np.arange(n, dtype=np.float32),
        mode="markers+text",
        text=list(labels),
        textposition="middle left" if left else "middle right",
        textfont={"size": 12 if n <= 40 else 10},
        marker={"size": [14 if b else 9 for b in big], "color": ["#d62728" if b else "#555" for b in big]},
        customdata=[[offset + i, side, *hover[i]] for i in range(n)],
        hovertemplate=template + "<extra></extra>",
        unselected={"marker": {"opacity": 1.0}, "textfont": {"color": "#444"}},
        selected={"marker": {"opacity": 1.0}},
        name=f"{side} tokens",
        showlegend=False,
    )


def attention_lines(
    pattern: np.ndarray, labels: Sequence[str], key_labels: Sequence[str], lines: LineSet, title: str
) -> go.Figure:
    """Queries (left) joined to keys (right) by one line per drawn weight, one colour per head.

    Shapes: pattern [h, n_q, n_k] (the whole stack: hover lists each token's largest weights in the drawn
    heads); labels [n_q]; key_labels [n_k]; ``lines`` from select_lines on the same pattern.
    """
    p = _f32(pattern)
    (q0, q1), (k0, k1) = lines.q_window, lines.k_window
    colours = head_colours(len(lines.heads))
    fig = go.Figure()
    for h, rgb in zip(lines.heads, colours, strict=True):  # legend entries, full colour (buckets have none)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line={"color": f"rgb({rgb})", "width": 3},
                                 name=f"head {h}", legendgroup=f"head {h}"))  # fmt: skip
    level = np.clip(np.ceil(lines.weight * LEVELS), 1, LEVELS).astype(int)  # [m]
    rows = max(q1 - q0, k1 - k0)
    width = 2.0 if rows <= 40 else 1.2
    for lv in range(1, LEVELS + 1):  # faint levels first, so strong lines lie on top whatever their head
        for h, rgb in zip(lines.heads, colours, strict=True):
            s = (level == lv) & (lines.head == h)
            m = int(s.sum())
            if m == 0:
                continue
            nan = np.full(m, np.nan, dtype=np.float32)
            y = np.stack([lines.query[s] - q0, lines.key[s] - k0, nan], axis=1).astype(np.float32).ravel()
            weight = lines.weight[s]
            fig.add_trace(
                go.Scatter(
                    x=np.tile(np.asarray([0.0, 1.0, np.nan], dtype=np.float32), m),
                    y=y,
                    customdata=np.stack([weight, weight, nan], axis=1).ravel(),  # each line's exact weight
                    mode="lines",
                    line={"color": f"rgba({rgb},{(lv - 0.5) / LEVELS:.4f})", "width": width},
                    hoverinfo="skip",
                    name=f"head {h}",
                    legendgroup=f"head {h}",
                    showlegend=False,
                )
            )
    q_hover = _hover_lines(p, key_labels, lines.heads, 2, lines.q_window)
    k_hover = _hover_lines(p, labels, lines.heads, 1, lines.k_window)
    fig.add_trace(_token_trace(labels[q0:q1], q0, "query", q_hover, lines.focus))
    fig.add_trace(_token_trace(key_labels[k0:k1], k0, "key", k_hover, None))
    fig.update_xaxes(visible=False, range=[-0.8, 1.8], fixedrange=True)
    fig.update_yaxes(visible=False, range=[rows - 0.5, -0.5])
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=int(max(320, ROW_PX * rows + 130)),
        margin={"l": 10, "r": 10, "t": 90, "b": 10},
        hovermode="closest",
        clickmode="event+select",
        dragmode="pan",
        legend={"orientation": "h", "y": -0.01, "yanchor": "top"},
        plot_bgcolor="white",
    )
    fig = safe(fig)
    # the note holds no user text, so it is added after escaping (its <br> must stay a line break)
    fig.add_annotation(text=line_note(lines, len(labels), len(key_labels)), xref="paper", yref="paper", x=0, y=1,
                       xanchor="left", yanchor="bottom", showarrow=False, font={"size": 11}, align="left")  # fmt: skip
    return fig


def line_note(lines: LineSet, n_q: int, n_k: int) -> str:
    """What the figure leaves out, in one line: the threshold, the cap, the windows."""
    parts = [f"{lines.weight.size} lines, weight ≥ {lines.threshold:g}; opacity ∝ weight ({LEVELS} steps)"]
    if lines.capped:
        parts.append(f"{lines.capped} smaller lines over the cap of {MAX_SEGMENTS} left out")
    (q0, q1), (k0, k1) = lines.q_window, lines.k_window
    if q1 - q0 < n_q:
        parts.append(f"queries {q0}–{q1 - 1} of {n_q}")
    if k1 - k0 < n_k:
        parts.append(f"keys {k0}–{k1 - 1} of {n_k} ({lines.outside:.0%} of the weight goes outside)")
    return "; ".join(parts[:1]) + ("<br>" + "; ".join(parts[1:]) if parts[1:] else "")

"""Plotly figures from traces and analysis: the only module that imports plotly (no Streamlit here).

Arrays go to Plotly as numpy float32 (serialised as compact typed arrays, never Python lists).
Attention heatmaps put query tokens on y (top to bottom) and key tokens on x; labels must be
distinct (see loading.distinct_labels) or a categorical axis would merge repeated words.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

WEIGHT_HOVER = "%{y} → %{x}: %{z:.3f}<extra>%{meta}</extra>"
CELL_HOVER = "%{y} → %{x}: %{customdata[0]:.3f}<extra>%{meta}</extra>"
SEQUENTIAL = "Viridis"
DIVERGING = "RdBu_r"
CLICK_OVERLAY_MAX_CELLS = 10_000  # per figure; above this, heads open from the selector only
GRID_MAX_CELLS = 128  # per side of each small heatmap; longer texts are shown block-averaged
POOLED_HOVER = "%{y} → %{x}: mean %{z:.3f}<extra>%{meta}</extra>"


def pool_blocks(stack: np.ndarray, max_cells: int) -> tuple[np.ndarray, int]:
    """Average the last two axes over f×f blocks so each side has at most ``max_cells`` cells.

    The last block on each side may be partial (it averages the positions it has). Shapes:
    [..., n_q, n_k] -> ([..., ceil(n_q / f), ceil(n_k / f)], f).
    """
    nq, nk = int(stack.shape[-2]), int(stack.shape[-1])
    f = max(1, math.ceil(max(nq, nk) / max_cells))
    if f == 1:
        return _f32(stack), 1
    mq, mk = math.ceil(nq / f), math.ceil(nk / f)
    widths = [(0, 0)] * (stack.ndim - 2) + [(0, mq * f - nq), (0, mk * f - nk)]
    padded = np.pad(_f32(stack), widths)
    counts = np.pad(np.ones((nq, nk), dtype=np.float32), widths[-2:])
    shape = (*stack.shape[:-2], mq, f, mk, f)
    sums = padded.reshape(shape).sum((-1, -3))
    return (sums / counts.reshape(mq, f, mk, f).sum((-1, -3))).astype(np.float32), f


def block_labels(tokens: Sequence[str], f: int) -> list[str]:
    """Axis labels for f-token blocks: "first–last: first token" (distinct by position)."""
    n = len(tokens)
    return [f"{a}–{min(a + f, n) - 1}: {tokens[a]}" for a in range(0, n, f)]


def _esc(value: object) -> object:
    """Text for Plotly, shown as typed: Plotly renders a few tags (<b>, <a href>, <span style>, <br>)
    in labels, titles and hover text, so & < > become entities (which it displays literally)."""
    return html.escape(value, quote=False) if isinstance(value, str) else value


def _esc_seq(values):
    if isinstance(values, tuple | list):
        return type(values)(_esc(v) for v in values)
    if isinstance(values, np.ndarray) and values.dtype == object:
        return np.vectorize(_esc, otypes=[object])(values) if values.size else values
    return values


def safe(fig: go.Figure) -> go.Figure:
    """Escape every text that can come from users (token labels, titles, names) in a finished figure.

    Hover templates are ours and never embed user text: they refer to %{x}, %{y}, %{meta}, %{customdata},
    which are escaped here.
    """
    for trace in fig.data:
        for attr in ("x", "y", "customdata"):
            values = getattr(trace, attr, None)
            if values is not None:
                setattr(trace, attr, _esc_seq(values))
        for attr in ("name", "meta"):
            if isinstance(getattr(trace, attr, None), str):
                setattr(trace, attr, _esc(getattr(trace, attr)))
    layout = fig.layout
    if layout.title and layout.title.text:
        layout.title.text = _esc(layout.title.text)
    for ann in layout.annotations or ():
        ann.text = _esc(ann.text)
    for axis in [k for k in layout if k.startswith(("xaxis", "yaxis"))]:
        if layout[axis].ticktext is not None:
            layout[axis].ticktext = _esc_seq(list(layout[axis].ticktext))
    return fig


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def _grid(n: int, cols: int) -> tuple[int, int]:
    cols = max(1, min(cols, n))
    return math.ceil(n / cols), cols


def _style_attention_axes(fig: go.Figure, n_tokens: int) -> None:
    """Category axes; every label shown while they fit (Plotly thins them out beyond that)."""
    size = 10 if n_tokens <= 20 else 8
    every = {"dtick": 1} if n_tokens <= 40 else {}
    fig.update_yaxes(autorange="reversed", tickfont={"size": size}, type="category", **every)
    fig.update_xaxes(tickangle=-90, tickfont={"size": size}, type="category", **every)


def heads_grid(
    pattern: np.ndarray,
    tokens: Sequence[str],
    titles: Sequence[str] | None = None,
    cols: int = 4,
    clickable: bool = True,
    key_tokens: Sequence[str] | None = None,
) -> go.Figure:
    """One heatmap per head on a shared colour scale (0 to the largest weight shown).

    With ``clickable`` and few enough cells, an invisible scatter marker sits on every cell, so a
    click reports (head, query, key) to Streamlit (heatmaps alone send no selection events); the
    markers then also carry the hover text "query → key: weight". Texts longer than
    GRID_MAX_CELLS tokens are shown averaged over token blocks (hover says "mean"); the single-head
    view shows every weight. Shapes: pattern [n_heads, query_pos, key_pos]; tokens [query_pos];
    key_tokens [key_pos] (default: tokens).
    """
    h = int(pattern.shape[0])
    keys = tokens if key_tokens is None else key_tokens
    pattern, f = pool_blocks(pattern, GRID_MAX_CELLS)
    if f > 1:
        tokens, keys, clickable = block_labels(tokens, f), block_labels(keys, f), False
    n, nk = len(tokens), len(keys)
    titles = list(titles) if titles is not None else [f"head {i}" for i in range(h)]
    rows, cols = _grid(h, cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=titles,
        shared_xaxes=True,  # token labels on the outer axes only: a third of the text to lay out
        shared_yaxes=True,
        horizontal_spacing=0.015,
        vertical_spacing=min(0.06, 0.3 / rows) if rows > 1 else 0.0,
    )
    z = _f32(pattern)
    labels, klabels = list(tokens), list(keys)
    overlay = clickable and h * n * nk <= CLICK_OVERLAY_MAX_CELLS
    qi, ki = np.meshgrid(np.arange(n), np.arange(nk), indexing="ij")
    cell_x = [klabels[k] for k in ki.ravel()]  # key label of every cell, row by row
    cell_y = [labels[q] for q in qi.ravel()]  # query label of every cell
    traces, at_rows, at_cols = [], [], []
    for i in range(h):
        r, c = i // cols + 1, i % cols + 1
        traces.append(
            go.Heatmap(
                z=z[i],
                x=klabels,
                y=labels,
                coloraxis="coloraxis",
                hovertemplate=POOLED_HOVER if f > 1 else WEIGHT_HOVER,
                meta=titles[i],
                hoverinfo="skip" if overlay else None,
                name=titles[i],
            )
        )
        at_rows.append(r)
        at_cols.append(c)
        if overlay:  # customdata per cell: (weight, head), numeric, so it travels as a typed array
            custom = np.stack([z[i].ravel(), np.full(n * nk, i, dtype=np.float32)], axis=1)
            traces.append(
                go.Scatter(
                    x=cell_x,
                    y=cell_y,
                    mode="markers",
                    marker={"size": 12, "opacity": 0},
                    customdata=custom,
                    hovertemplate=CELL_HOVER,
                    showlegend=False,
                    name=f"{titles[i]} cells",
                    meta=titles[i],
                )
            )
            at_rows.append(r)
            at_cols.append(c)
    fig.add_traces(traces, rows=at_rows, cols=at_cols)
    _style_attention_axes(fig, max(n, nk))
    fig.update_layout(
        coloraxis={"colorscale": SEQUENTIAL, "cmin": 0.0, "cmax": float(z.max()) if z.size else 1.0},
        coloraxis_colorbar={"title": {"text": "weight"}},
        height=max(340, (290 if n <= 24 else 340) * rows + 60),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        hovermode="closest",
        clickmode="event+select",
        dragmode="zoom",
    )
    return safe(fig)


def matrix_heatmap(
    z: np.ndarray,
    x: Sequence[str] | None = None,
    y: Sequence[str] | None = None,
    title: str = "",
    diverging: bool = False,
    value_name: str = "value",
    height: int | None = None,
    attention: bool = False,
) -> go.Figure:
    """One heatmap of any matrix (a head's pattern, Q_i, a difference...), with its title.

    ``diverging`` centres a red-blue scale on 0 (for signed values and differences); otherwise
    Viridis. -inf (masked scores) shows as a gap. ``attention`` uses the "query → key" hover.
    Shapes: z [rows, cols]; x [cols]; y [rows].
    """
    data = _f32(z).copy()
    data[~np.isfinite(data)] = np.nan
    rows, cols = data.shape
    xl = list(x) if x is not None else list(range(cols))
    yl = list(y) if y is not None else list(range(rows))
    finite = data[np.isfinite(data)]
    if diverging:
        lim = float(np.abs(finite).max()) if finite.size else 1.0
        scale = {"colorscale": DIVERGING, "zmid": 0.0, "zmin": -lim, "zmax": lim}
    else:
        scale = {"colorscale": SEQUENTIAL}
    hover = WEIGHT_HOVER if attention else f"row %{{y}}, column %{{x}}: %{{z:.4f}}<extra>{value_name}</extra>"
    fig = go.Figure(
        go.Heatmap(z=data, x=xl, y=yl, hovertemplate=hover, meta=title, colorbar={"title": value_name}, **scale)
    )
    fig.update_yaxes(autorange="reversed")
    if x is not None:
        fig.update_xaxes(type="category", tickangle=-60)
    if y is not None:
        fig.update_yaxes(type="category")
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=height or int(min(720, max(300, 26 * rows + 140))),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return safe(fig)


FOCUS_TOP_KEYS = 24  # beyond this many tokens, each head's bars show its largest weights only


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
                marker={"color": w, "colorscale": SEQUENTIAL, "cmin": 0.0, "cmax": 1.0},
                hovertemplate=f"%{{meta}} → %{{x}}: %{{y:.3f}}<extra>head {i}</extra>",
                meta=qlabel,
                showlegend=False,
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_xaxes(type="category", tickangle=-60, tickfont={"size": 9})
    fig.update_yaxes(range=[0, 1])
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


def lines(x: Sequence[float], series: dict[str, Sequence[float]], title: str, x_title: str) -> go.Figure:
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


def overview(patterns: np.ndarray, tile: int = 48, gap: int = 2) -> go.Figure:
    """All layers × heads in one heatmap: one tile per head, rows = layers, columns = heads.

    Tiles larger than ``tile`` tokens are block-averaged down to about ``tile`` cells (the Heads
    view shows them at full resolution). One invisible marker per tile reports clicks as
    customdata (layer, head). Shapes: patterns [n_layers, n_heads, n_query, n_key].
    """
    n_layers, n_heads = patterns.shape[:2]
    small, f = pool_blocks(patterns, tile)  # [L, H, mq, mk]
    mq, mk = small.shape[-2:]
    step_y, step_x = mq + gap, mk + gap
    canvas = np.full((n_layers * step_y - gap, n_heads * step_x - gap), np.nan, dtype=np.float32)
    for layer in range(n_layers):
        for head in range(n_heads):
            canvas[layer * step_y : layer * step_y + mq, head * step_x : head * step_x + mk] = small[layer, head]
    centres_x = [h * step_x + (mk - 1) / 2 for h in range(n_heads)]
    centres_y = [la * step_y + (mq - 1) / 2 for la in range(n_layers)]
    fig = go.Figure(
        go.Heatmap(
            z=canvas,
            colorscale=SEQUENTIAL,
            zmin=0.0,
            zmax=float(np.nanmax(canvas)) if np.isfinite(canvas).any() else 1.0,
            hoverinfo="skip",
            colorbar={"title": "weight"},
        )
    )
    lx, hx = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")
    fig.add_trace(
        go.Scatter(
            x=[centres_x[h] for h in hx.ravel()],
            y=[centres_y[la] for la in lx.ravel()],
            mode="markers",
            marker={"size": max(8, min(40, 600 // max(n_heads, 1))), "opacity": 0, "symbol": "square"},
            customdata=np.stack([lx.ravel(), hx.ravel()], axis=1),
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}: click to open<extra></extra>",
            showlegend=False,
        )
    )
    fig.update_xaxes(tickvals=centres_x, ticktext=[f"H{h}" for h in range(n_heads)], showgrid=False, zeroline=False)
    fig.update_yaxes(
        tickvals=centres_y,
        ticktext=[f"L{la}" for la in range(n_layers)],
        autorange="reversed",
        showgrid=False,
        zeroline=False,
        scaleanchor="x",
    )
    note = f" (each tile averaged over {f}×{f} token blocks)" if f > 1 else ""
    fig.update_layout(
        title={"text": f"All {n_layers} layers × {n_heads} heads{note}", "font": {"size": 14}},
        height=int(min(900, max(320, 900 * n_layers / max(n_heads, 1) + 120))),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        clickmode="event+select",
    )
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

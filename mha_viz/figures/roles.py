"""The head-role map: one cell per layer × head, coloured by the head's role label."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from mha_viz.figures.common import _esc, _esc_seq, _f32, click_marker, layer_head_layout, plural
from mha_viz.figures.finish import _text_px

# A fixed colour per known label (so a label keeps its colour from text to text); other labels
# ("[SEP] sink", "<|endoftext|> sink", ...) take the next free colour of EXTRA_COLOURS.
ROLE_COLOURS = {
    "induction": "#d62728",
    "duplicate token": "#ff7f0e",
    "previous token": "#1f77b4",
    "next token": "#17becf",
    "self": "#2ca02c",
    "punctuation": "#bcbd22",
    "first-token sink": "#6f4e37",
    "broad": "#9467bd",
    "mixed": "#d9d9d9",
}
LEGEND_FONT = 12  # px: the key of labels
LEGEND_ROW = 20  # px per legend entry at LEGEND_FONT (plotly.js: about 19)
LEGEND_SYMBOL = 44  # px: the entry's square, the gaps around it and the legend's own padding
EXTRA_COLOURS = ("#8c564b", "#e377c2", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94")


def role_colours(labels: Sequence[str]) -> dict[str, str]:
    """A colour for each distinct label, in order of first appearance (known labels keep theirs)."""
    out: dict[str, str] = {}
    extra = 0
    for label in labels:
        if label in out:
            continue
        if label in ROLE_COLOURS:
            out[label] = ROLE_COLOURS[label]
        else:
            out[label] = EXTRA_COLOURS[extra % len(EXTRA_COLOURS)]
            extra += 1
    return out


def roles_map(labels: np.ndarray, scores: Mapping[str, np.ndarray], title: str | None = None) -> go.Figure:
    """Layer (rows) × head (columns) cells coloured by role label, with a key of the labels at the side.

    The heatmap itself is silent; one invisible marker per cell (a trace per label) carries the hover
    text (label and every score) and reports clicks as customdata (layer, head, scores...).
    Shapes: labels [L, H] str; each score [L, H].
    """
    labels = np.asarray(labels, dtype=object)
    n_layers, n_heads = labels.shape
    known = list(ROLE_COLOURS)
    order = sorted(set(labels.ravel().tolist()), key=lambda s: (known.index(s) if s in known else len(known) - 1.5, s))
    colours = role_colours(order)
    k = max(1, len(order))
    index = {label: i for i, label in enumerate(order)}
    z = np.vectorize(index.__getitem__, otypes=[np.float32])(labels) if labels.size else np.zeros((0, 0))
    scale = []
    for i, label in enumerate(order):
        scale += [[i / k, colours[label]], [(i + 1) / k, colours[label]]]
    counts = {label: int((labels == label).sum()) for label in order}
    heat = {
        "type": "heatmap", "z": _f32(z), "x": list(range(n_heads)), "y": list(range(n_layers)),
        "colorscale": scale or [[0, "#ffffff"], [1, "#ffffff"]], "zmin": -0.5, "zmax": k - 0.5, "xgap": 1, "ygap": 1,
        "hoverinfo": "skip",
        "showscale": False,  # the key is the legend (a row per label): the bar's ticks overlapped on short maps
        "colorbar": {"tickvals": list(range(k)), "ticktext": _esc_seq([f"{lb} ({counts[lb]})" for lb in order])},
    }  # fmt: skip
    names = list(scores)
    hover = "<br>".join(f"{name} %{{customdata[{j + 2}]:.3f}}" for j, name in enumerate(names))
    lx, hx = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")
    columns = [lx, hx] + [np.asarray(scores[name], dtype=np.float64) for name in names]
    custom = _f32(np.stack([c.ravel() for c in columns], axis=1)) if labels.size else np.zeros((0, 2))
    flat = labels.ravel()
    traces = [heat]
    for label in order:
        at = np.flatnonzero(flat == label)
        traces.append(
            {"type": "scatter", "x": hx.ravel()[at].astype(np.float32), "y": lx.ravel()[at].astype(np.float32),
             "mode": "markers", "marker": click_marker(max(8, min(30, 600 // max(n_heads, 1))), "square"),
             "customdata": custom[at], "meta": _esc(label), "name": _esc(label),
             "hovertemplate": "layer %{customdata[0]}, head %{customdata[1]}: <b>%{meta}</b><br>" + hover
             + "<br>click to open<extra></extra>", "showlegend": False}
        )  # fmt: skip
    entries = [f"{label} ({counts[label]})" for label in order]
    for rank, (label, entry) in enumerate(zip(order, entries, strict=True)):  # the key: legend only, no bars
        traces.append(
            {"type": "bar", "x": [None], "y": [None], "name": _esc(entry), "legendrank": rank, "hoverinfo": "skip",
             "showlegend": True, "marker": {"color": colours[label], "line": {"color": "#555", "width": 1}}}
        )  # fmt: skip
    layout = layer_head_layout(
        n_layers, n_heads, _esc(title or f"Head roles: {plural(n_layers, 'layer')} × {plural(n_heads, 'head')}")
    )
    if n_heads <= 24:  # "H0" … "H23" fit level (the automatic estimate stood them on end)
        layout["xaxis"]["tickangle"] = 0
    # the cells exactly: the invisible click markers would pad the automatic ranges (an empty band under the map)
    layout["xaxis"] |= {"range": [-0.5, n_heads - 0.5], "autorange": False}
    layout["yaxis"] |= {"range": [n_layers - 0.5, -0.5], "autorange": False}
    widest = max((_text_px(e, LEGEND_FONT)[0] for e in [*entries, "role (heads)"]), default=0.0)
    layout |= {
        "plot_bgcolor": "white",
        "height": max(layout["height"], 50 + 40 + LEGEND_ROW * (len(entries) + 2)),  # a row per entry, the title
        "showlegend": True,
        "legend": {
            "orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0, "yanchor": "top",
            "title": {"text": "role (heads)"}, "font": {"size": LEGEND_FONT}, "itemclick": False,
            "itemdoubleclick": False, "tracegroupgap": 0,
        },
    }  # fmt: skip
    layout["margin"] |= {"r": int(widest + LEGEND_SYMBOL + 16)}
    # built unchecked, every user text escaped above (as safe() would): plotly's checks, the update_* calls and
    # safe() cost most of the Head roles page run (issue 36 §6); tests/test_figure_speed.py checks that plotly's
    # checks accept this figure unchanged and that it is the figure they used to build
    return go.Figure({"data": traces, "layout": layout}, _validate=False)

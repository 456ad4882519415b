"""The look every figure is drawn with, written into the figure itself (no template, no theme from Streamlit).

These are the values Streamlit's own Plotly theme gives a chart on the app's light theme (.streamlit/config.toml:
``base = "light"``): the Source Sans font, grey tick labels, light grid lines, Streamlit's blues and colourway.
They are set here as the figure's own layout and trace values, where the figure has none, because Streamlit's
theme is a ``layout.template`` that its chart rebuilds as a new object after the first draw; plotly.js compares
templates by identity, so every chart (every layer change, every tab) was laid out and drawn twice. With the look
in the figure, st.plotly_chart(..., theme=None) and ``layout.datarevision`` (see finish), the second pass finds
nothing changed and draws nothing: half the browser's work on a layer change.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

GREY = "#808495"  # tick labels, axis titles, colour-bar text
INK = "#2F2D2B"  # figure titles
LINE = "#e6eaf1"  # grid, zero and tick lines
RULE = "rgba(47, 45, 43, 0.1)"  # table lines
FONT = '"Source Sans", sans-serif'
BLUES = ["#e4f5ff", "#c7ebff", "#a6dcff", "#83c9ff", "#60b4ff", "#3d9df3", "#1c83e1", "#0068c9", "#0054a3", "#004280"]
REDS_BLUES = [
    "#7d353b", "#bd4043", "#ff4b4b", "#ff8c8c", "#ffc7c7", "#a6dcff", "#60b4ff", "#1c83e1", "#0054a3", "#004280",
]  # fmt: skip
COLORWAY = ["#0068c9", "#83c9ff", "#ff2b2b", "#ffabab", "#29b09d", "#7defa1", "#ff8700", "#ffd16a", "#6d3fc0",
            "#d5dae5"]  # fmt: skip


def _scale(colours: Sequence[str]) -> list[list]:
    return [[i / (len(colours) - 1), c] for i, c in enumerate(colours)]


SEQUENTIAL = _scale(BLUES)
_TICKS = {"color": GREY, "size": 12}
_AXIS_TITLE = {"font": {"color": GREY, "size": 14}}

LAYOUT: dict = {
    "font": {"color": GREY, "family": FONT, "size": 12, "weight": 400},
    "title": {  # bold, as Streamlit's theme draws titles (it wraps their text in <b>)
        "font": {"family": FONT, "size": 16, "color": INK, "weight": 700}, "pad": {"l": 4}, "xanchor": "left", "x": 0,
    },
    "legend": {
        "title": {"font": {"size": 12, "color": GREY}, "side": "top"},
        "valign": "top", "bordercolor": "rgba(0,0,0,0)", "borderwidth": 0, "font": {"size": 12, "color": "#262730"},
    },
    "paper_bgcolor": "#FFFFFF",
    "plot_bgcolor": "#FFFFFF",
    "hoverlabel": {"bgcolor": "#FFFFFF", "bordercolor": "#DCD8D4", "font": {"color": GREY, "family": FONT, "size": 12}},
    "colorway": COLORWAY,
    "colorscale": {"sequential": SEQUENTIAL, "sequentialminus": SEQUENTIAL, "diverging": _scale(REDS_BLUES)},
}  # fmt: skip
X_AXIS: dict = {
    "zerolinecolor": LINE, "gridcolor": LINE, "showgrid": False, "tickfont": _TICKS, "tickcolor": LINE,
    "title": {**_AXIS_TITLE, "standoff": 20}, "zeroline": False,
}  # fmt: skip
Y_AXIS: dict = {
    "ticklabelposition": "outside", "zerolinecolor": LINE, "title": {**_AXIS_TITLE, "standoff": 24},
    "tickcolor": LINE, "tickfont": _TICKS, "gridcolor": LINE,
}  # fmt: skip
# a colour bar's numbers as decimals (0.0004, 0.05, 180), not Plotly's SI prefixes: at length the weights are 400μ
TICK_FORMAT = "~g"
COLOR_AXIS: dict = {
    "colorscale": SEQUENTIAL,
    "colorbar": {
        "thickness": 16, "xpad": 24, "ticklabelposition": "outside", "outlinecolor": "rgba(0,0,0,0)", "outlinewidth": 8,
        "len": 0.75, "y": 0.5745, "title": _AXIS_TITLE, "tickfont": _TICKS, "tickformat": TICK_FORMAT,
    },
}  # fmt: skip
TRACES: dict[str, dict] = {  # by trace type; a scale only where the trace has neither its own nor a colour axis
    "heatmap": {"colorscale": SEQUENTIAL, "colorbar": {"tickformat": TICK_FORMAT}},
    "contour": {"colorscale": SEQUENTIAL, "colorbar": {"tickformat": TICK_FORMAT}},
    "histogram2d": {"colorscale": SEQUENTIAL, "colorbar": {"tickformat": TICK_FORMAT}},
    "table": {
        "cells": {"fill": {"color": "#FFFFFF"}, "font": {"color": "#262730"}, "line": {"color": RULE}},
        "header": {"fill": {"color": "rgba(252, 252, 251, 1)"}, "font": {"color": GREY}, "line": {"color": RULE}},
    },
}  # fmt: skip
_AXIS = re.compile(r"([xy])axis\d*")
_COLOR_AXIS = re.compile(r"coloraxis\d*")


def dress(data: list[dict], layout: dict) -> None:
    """Give the figure the look wherever it sets nothing of its own (a template's rule: the figure's values win).

    Changes ``layout`` and the trace dicts in place (finish hands it copies); nested settings are copied, never
    shared with the constants here.
    """
    if isinstance(layout.get("title"), str):
        layout["title"] = {"text": layout["title"]}
    _defaults(layout, LAYOUT)
    for t in data:
        if t.get("coloraxis"):
            layout.setdefault(t["coloraxis"], {})
        own = TRACES.get(t.get("type", "scatter"), {})
        if "colorscale" in own and (t.get("coloraxis") or t.get("colorscale") is not None):
            own = {k: v for k, v in own.items() if k != "colorscale"}
        _defaults(t, own)
    for name in list(layout):
        if m := _AXIS.fullmatch(name):
            layout[name] = axis = dict(layout[name])
            own = X_AXIS if m.group(1) == "x" else Y_AXIS
            if not axis.get("ticks"):  # a figure's tick colour turns tick marks on (a template's does not)
                own = {k: v for k, v in own.items() if k != "tickcolor"}
            _defaults(axis, own)
        elif _COLOR_AXIS.fullmatch(name):
            layout[name] = axis = dict(layout[name])
            _defaults(axis, COLOR_AXIS)


def _defaults(target: dict, look: dict) -> None:
    for k, v in look.items():
        if k not in target or target[k] is None:
            target[k] = _copy(v)
        elif isinstance(v, dict) and isinstance(target[k], dict):
            target[k] = inner = dict(target[k])
            _defaults(inner, v)


def _copy(v: object) -> object:
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v

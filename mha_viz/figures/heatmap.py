"""One heatmap of any matrix: a head's pattern, Q_i, a difference..."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import get_colorscale

from mha_viz.analysis.referents import ordinal
from mha_viz.figures.common import DIVERGING, SEQUENTIAL, WEIGHT_HOVER, _esc, _esc_seq, _f32, category_ticks
from mha_viz.figures.look import LAYOUT

MASK_COLOUR = "#bdbdbd"  # cells that are not numbers (masked scores, −∞): grey, and the hover says what they are
_NOT_FINITE = (("−∞ (masked)", np.isneginf), ("+∞", np.isposinf), ("not a number", np.isnan))


# the scales as the colour lists plotly's checks turn their names into (plotly.js knows no "RdBu_r"): a matrix_spec
# dict is sent unchecked
_SCALES = {name: get_colorscale(name) for name in (DIVERGING, SEQUENTIAL)}
HALF_ROW_TITLE_CHARS = 54  # a title that fits a figure drawn two to a row (Step by step, Lesson) at 1280 px
HALF_ROW_PX = 440  # about how wide a figure drawn two to a row is at 1280 px (its plot area ≈ 220 px less)


def matrix_heatmap(
    z: np.ndarray,
    x: Sequence[str] | None = None,
    y: Sequence[str] | None = None,
    title: str = "",
    diverging: bool = False,
    value_name: str = "value",
    height: int | None = None,
    attention: bool = False,
    zmin: float | None = None,
    zmax: float | None = None,
    width: int = HALF_ROW_PX,
    title_chars: int | None = None,
) -> go.Figure:
    """One heatmap of any matrix (a head's pattern, Q_i, a difference...), with its title: matrix_spec's figure,
    checked by plotly."""
    return go.Figure(
        matrix_spec(z, x, y, title, diverging, value_name, height, attention, zmin, zmax, width, title_chars)
    )


def matrix_spec(
    z: np.ndarray,
    x: Sequence[str] | None = None,
    y: Sequence[str] | None = None,
    title: str = "",
    diverging: bool = False,
    value_name: str = "value",
    height: int | None = None,
    attention: bool = False,
    zmin: float | None = None,
    zmax: float | None = None,
    width: int = HALF_ROW_PX,
    title_chars: int | None = None,
) -> dict:
    """matrix_heatmap's figure as a plain dict ({"data", "layout"}), not built as a plotly object: a view that
    draws many matrices (Step by step's eleven) skips plotly's checks, which matrix_heatmap runs on the very same
    dict (tests/test_figure_speed.py checks that they accept it unchanged).

    ``diverging`` centres a red-blue scale on 0 (for signed values and differences); otherwise
    Viridis, from ``zmin`` to ``zmax`` when given (so two figures can share one scale). -inf (masked
    scores) shows as a grey cell whose hover says "−∞ (masked)", never "NaN". ``attention`` uses the
    "query → key" hover. Token labels: every one while they fit in about ``width`` pixels (the figure's
    expected width; its plot area is about 220 px less), else every k-th, and the axis title says so.
    ``title_chars``: a title longer than this breaks into lines at spaces (never inside a shape "[n × m]"), for
    figures drawn two to a row. Shapes: z [rows, cols]; x [cols]; y [rows].
    """
    raw = _f32(z)
    data = raw.copy()
    data[~np.isfinite(data)] = np.nan
    rows, cols = data.shape
    xl = list(x) if x is not None else list(range(cols))
    yl = list(y) if y is not None else list(range(rows))
    finite = data[np.isfinite(data)]
    if diverging:
        lim = float(np.abs(finite).max()) if finite.size else 1.0
        scale = {"colorscale": _SCALES[DIVERGING], "zmid": 0.0, "zmin": -lim, "zmax": lim}
    else:
        scale = {"colorscale": _SCALES[SEQUENTIAL]}
        scale |= {k: v for k, v in (("zmin", zmin), ("zmax", zmax)) if v is not None}
    where = "%{y} → %{x}" if attention else "row %{y}, column %{x}"
    hover = WEIGHT_HOVER if attention else f"{where}: %{{z:.4f}}<extra>{value_name}</extra>"
    # Every text from users is escaped here, before the figure is built once (a built figure's update_* calls and
    # a pass of safe() cost several times the construction): the same figure safe() would give.
    ex, ey, meta, name = _esc_seq(xl), _esc_seq(yl), _esc(title), _esc(value_name)
    traces = [
        {"type": "heatmap", "z": data, "x": ex, "y": ey, "hovertemplate": hover, "meta": meta,
         "colorbar": {"title": {"text": value_name}}, "hoverongaps": False, "name": name, **scale}
    ]  # fmt: skip
    for text, test in _NOT_FINITE:  # one grey layer per kind of non-number, drawn over the gaps it leaves
        cells = test(raw)
        if cells.any():
            traces.append(
                {"type": "heatmap", "z": np.where(cells, 0.0, np.nan).astype(np.float32), "x": ex, "y": ey,
                 "showscale": False, "colorscale": [[0.0, MASK_COLOUR], [1.0, MASK_COLOUR]], "hoverongaps": False,
                 "meta": meta, "name": _esc(text), "hovertemplate": f"{where}: {text}<extra>{value_name}</extra>"}
            )  # fmt: skip
    height = height or int(min(720, max(300, 26 * rows + 140)))
    xaxis: dict = {}
    yaxis: dict = {"autorange": "reversed"}
    if x is not None:
        ticks, k = category_ticks(xl, width - 220, angle=-60 if len(xl) <= 20 else -90)
        xaxis |= _escaped_ticks(ticks) | _axis_title(k, "column")
    if y is not None:
        ticks, k = category_ticks(yl, height - 150)
        yaxis |= _escaped_ticks(ticks) | _axis_title(k, "row")
    lines = wrap_title(_esc(title), title_chars)
    layout = {
        "xaxis": xaxis,
        "yaxis": yaxis,
        "title": {"text": "<br>".join(lines), "font": {"size": 14}},
        "height": height + 18 * (len(lines) - 1),
        "margin": {"l": 10, "r": 10, "t": 50 + 18 * (len(lines) - 1), "b": 10},
    }
    return {"data": traces, "layout": layout}


def wrap_title(title: str, chars: int | None) -> list[str]:
    """``title`` in lines of at most ``chars`` characters, broken at single spaces outside brackets (a shape
    "[15 × 15]" and the gap before it stay whole); one line when ``chars`` is None or the title fits."""
    if chars is None or len(title) <= chars:
        return [title]
    glued = re.sub(r"\s+\[[^\]]*\]", lambda m: m.group(0).replace(" ", "\0"), title)  # "   [n × m]" unbreakable
    lines: list[str] = []
    for word in glued.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return [line.replace("\0", " ") for line in lines]


def _escaped_ticks(ticks: dict) -> dict:
    """category_ticks' settings with the tick values and texts (token labels) escaped, as safe() does."""
    return {**ticks, "tickvals": _esc_seq(list(ticks["tickvals"])), "ticktext": _esc_seq(list(ticks["ticktext"]))}


def _axis_title(k: int, what: str) -> dict:
    return {"title": _thinned(k, what) or {}}


def _thinned(k: int, what: str) -> dict | None:
    if k == 1:
        return None
    return {"text": f"every {ordinal(k)} {what} label shown; hover names each", "font": {"size": 10}}


TITLE_LOOK = {**LAYOUT["title"]["font"], "size": 14}  # a pair's panel titles look like a figure's title
PAIR_GAP = 0.04  # between the two panels of a pair, in plot fractions (≈ 30 px at 1280: the zoom handles' room)
PAIR_BAR_PX = 38  # a pair's colour bars sit above their panels: 6 px clear, its numbers, 10 px of bar


def same_rows(left: go.Figure | dict, right: go.Figure | dict) -> bool:
    """Whether two matrix_heatmap figures (or matrix_spec dicts) label their rows alike (so matrix_pair can draw
    them as one)."""
    return tuple(_rows(left)) == tuple(_rows(right))


def _rows(fig: go.Figure | dict) -> Sequence[str]:
    return fig["data"][0]["y"] if isinstance(fig, dict) else fig.data[0].y


def in_pairs(figures: Sequence[go.Figure | dict]) -> list[tuple[int, go.Figure | dict, bool]]:
    """The matrices two to a row, in order: two whose rows are the same labels as one figure (matrix_pair), any
    other alone. Each as (its index in ``figures``, the figure, whether it is a pair)."""
    out, j = [], 0
    while j < len(figures):
        if j + 1 < len(figures) and same_rows(figures[j], figures[j + 1]):
            out.append((j, matrix_pair(figures[j], figures[j + 1]), True))
            j += 2
            continue
        out.append((j, figures[j], False))
        j += 1
    return out


def matrix_pair(left: go.Figure | dict, right: go.Figure | dict | None) -> go.Figure | dict:
    """Two matrix_heatmap figures whose rows are the same tokens, drawn as one figure, side by side (two
    matrix_spec dicts: one dict, never built as a plotly object). ``right`` None: the left alone, drawn the same way
    (its title over it, its colour bar above it, half the width), to stack with pairs (figures.stack).

    One chart instead of two (Step by step's eleven matrices as six charts). The right panel's rows are the left's:
    one set of row labels. The axes are not linked with ``matches``, which made the tab 0.1 s slower to draw. Each
    panel keeps its title (above it), its own colour scale (a horizontal bar between its title and the plot, so
    nothing depends on the chart's width in pixels), its hover and its value name.
    """
    plain = isinstance(left, dict) and isinstance(right, dict | None)
    figs = [f if isinstance(f, dict) else f.to_plotly_json() for f in (left, right) if f is not None]
    la, lb = figs[0]["layout"], figs[-1]["layout"]
    half = (1 - PAIR_GAP) / 2
    domains = ((0.0, half), (1 - half, 1.0))[: len(figs)]
    titles = [str((f["layout"].get("title") or {}).get("text") or "") for f in figs]
    lines = max(1 + t.count("<br>") for t in titles)
    height = max(int(f["layout"].get("height") or 380) for f in figs) + PAIR_BAR_PX
    top = 54 + 18 * (lines - 1) + PAIR_BAR_PX
    plot_h = max(100.0, height - top - 90)  # about the plot's height (the bottom margin is set by finish)
    data, annotations = [], []
    for k, (fig, (x0, x1), title) in enumerate(zip(figs, domains, titles, strict=True)):
        ax = "" if k == 0 else "2"
        for t in fig["data"]:
            t = dict(t, xaxis="x" + ax, yaxis="y" + ax)
            if t.get("showscale") is not False:
                bar = dict(t.get("colorbar") or {})
                t["colorbar"] = bar | {
                    "orientation": "h", "x": (x0 + x1) / 2, "xanchor": "center", "len": 0.7 * (x1 - x0),
                    "y": 1 + 6 / plot_h, "yanchor": "bottom", "ypad": 0, "thickness": 10,
                    "title": {"text": ""},  # the panel's title names the matrix; the hover names the value
                }  # fmt: skip
            data.append(t)
        annotations.append(
            {"text": title, "x": (x0 + x1) / 2, "xanchor": "center", "xref": "paper", "y": 1, "yanchor": "bottom",
             "yref": "paper", "yshift": PAIR_BAR_PX + 4, "showarrow": False, "font": TITLE_LOOK}
        )  # fmt: skip
    layout = {
        "xaxis": {**la.get("xaxis", {}), "domain": list(domains[0]), "anchor": "y"},
        "yaxis": {**la.get("yaxis", {}), "anchor": "x"},
        "annotations": annotations,
        "height": height,
        "margin": {"l": 10, "r": 10, "t": top, "b": 10},
    }  # fmt: skip
    if len(figs) == 2:
        layout["xaxis2"] = {**lb.get("xaxis", {}), "domain": list(domains[1]), "anchor": "y2"}
        layout["yaxis2"] = {**lb.get("yaxis", {}), "anchor": "x2", "showticklabels": False, "ticks": "", "title": {}}
    # unchecked: both halves were checked as matrix_heatmap figures, and checking the pair again cost about a fifth of
    # Step by step's page run (issue 36 §6); tests/test_figures.py checks that plotly's checks accept it unchanged
    spec = {"data": data, "layout": layout}
    return spec if plain else go.Figure(spec, _validate=False)

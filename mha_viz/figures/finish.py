"""The last step of every figure before it is drawn: a plain JSON-ready dict that the browser lays out in one pass.

No template is sent and Streamlit's theme is not used: the look (fonts, colours, backgrounds) is written into the
figure (figures.look), so that Streamlit's chart draws it once (see figures.look for why). Axis
``automargin`` is off on every axis and the margins are computed here from the tick labels' lengths, the axis
titles and the colour bars, with ``margin.autoexpand`` off (unless a legend needs the margin to grow): plotly.js
then never measures its labels and redraws the plot to fit them (about a quarter of the browser's time on a
layer change). Labels keep their room: the estimate errs wide (see _text_px).
"""

from __future__ import annotations

import base64
import functools
import html
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
from _plotly_utils.utils import is_homogeneous_array, is_skipped_key, plotlyjsShortTypes, to_typed_array_spec
from plotly.basedatatypes import BaseFigure

from mha_viz.figures.look import COLOR_AXIS, dress

TICK_FONT = 12  # figures.look: tick labels at 12 px
TITLE_FONT = 14  # figures.look: axis titles at 14 px
PAD = 4  # margin.pad: between the plot area and its tick labels
STANDOFF = 8  # between tick labels and the axis title
SLACK = 6  # a few pixels more than the estimate, on every side with labels
COLORBAR_W = {"thickness": 30, "xpad": 10}  # plotly.js defaults for a trace's colour bar
_TAG = re.compile(r"<[^>]*>")
_NARROW = set("iljI.,:;'!|()[]{} ft-")
_WIDE = set("mwMW@%&")
_LEGEND_TYPES = {"scatter", "scattergl", "bar", "box", "histogram", "violin", "pie"}
_SCALARS = (str, int, float, bool, type(None))
_SHORT_TYPES = {k: v for k, v in plotlyjsShortTypes.items() if not k.endswith("int64")}  # (int64: plotly narrows)


DATA_REVISION = "mha-viz"  # plotly.js then skips comparing the data arrays when a chart redraws the same figure
# (Streamlit's chart copies the figure after its first draw: without it every array counts as changed and the
# chart is drawn twice). A new figure is a new chart element in Streamlit (its id hashes the figure), never an
# update of a drawn one, so the arrays of a drawn chart never change under the same revision.


class Finished(dict):
    """A figure's dict after finish(): drawn as it is (no second pass of checks, see ui.common.plot)."""


def finish(fig: go.Figure | dict) -> Finished:
    """The figure as a dict with no template, automargin off and margins that fit its labels. Idempotent."""
    if isinstance(fig, Finished):
        return fig
    # a figure's own dicts, not to_plotly_json()'s deep copy (half of a Step by step run): nothing here changes
    # them (every dict changed is a copy), and its arrays become typed arrays as to_plotly_json would make them
    spec = {"data": fig._data, "layout": fig._layout} if isinstance(fig, BaseFigure) else dict(fig)
    data = [_plain_vectors(_typed(t)) for t in spec.get("data", ())]
    layout = {k: v for k, v in dict(_typed(spec.get("layout") or {})).items() if k != "template"}
    margin = dict(layout.get("margin") or {})
    left = bottom = 0.0
    for name in [k for k in layout if re.fullmatch(r"[xy]axis\d*", k)]:
        layout[name] = axis = dict(layout[name])
        axis["automargin"] = False
    for letter in "xy":  # axes only traces name (a plain figure's xaxis) get their settings too
        for ref in {t.get(letter + "axis", letter) for t in data}:
            name = letter + "axis" + ref[1:]
            layout.setdefault(name, {"automargin": False})
            layout[name].setdefault("automargin", False)
    for name in [k for k in layout if re.fullmatch(r"[xy]axis\d*", k)]:
        axis = layout[name]
        if name.startswith("y"):
            if axis.get("side") != "right":
                left = max(left, _y_room(axis, lambda name=name: _axis_values(data, "y", name)))
        elif axis.get("side") != "top":
            bottom = max(bottom, _x_room(axis, lambda name=name: _axis_values(data, "x", name)))
    right = _colorbar_room(data, layout)
    bottom = max(bottom, _colorbar_below(data, layout))
    top = margin.get("t", 50 if _title(layout) else 10)
    given = {k: float(margin.get(k, 0)) for k in "lrb"}  # a figure's own margin is a minimum (room it planned)
    margin.update(
        l=math.ceil(max(left, given["l"])),
        r=math.ceil(max(10.0, right, given["r"])),
        b=math.ceil(max(10.0, bottom, given["b"])),
        t=top,
        pad=PAD,
    )
    margin["autoexpand"] = _legend_shown(data, layout)  # a legend may still need the margin to grow
    layout["margin"] = margin
    dress(data, layout)  # the look, in the figure (figures.look): after the margins, whose settings win
    layout.setdefault("datarevision", DATA_REVISION)
    return Finished(data=data, layout=_pruned(layout))


def _typed(obj: object) -> object:
    """``obj`` with every numeric array as Plotly's typed array ({dtype, bdata, shape}), as to_plotly_json's
    convert_to_base64 makes them, but copy on write: a dict or list with nothing to convert is the same object.
    Lists of plain values (token labels) are not walked: they hold no arrays."""
    if isinstance(obj, dict):
        out = None
        for k, v in obj.items():
            if isinstance(v, _SCALARS) or is_skipped_key(k):  # (a scalar: neither an array nor holding one)
                continue
            if isinstance(v, np.ndarray):
                new = _typed_array(v)
            elif isinstance(v, dict | list | tuple):  # (never a homogeneous array for plotly: walked)
                new = _typed(v)
            else:  # anything else (a tensor, a series): plotly's own test and conversion
                new = to_typed_array_spec(v) if is_homogeneous_array(v) else _typed(v)
            if new is not v:
                out = dict(obj) if out is None else out
                out[k] = new
        return obj if out is None else out
    if isinstance(obj, list | tuple) and obj and not isinstance(obj[0], str | int | float | bool):
        items = [_typed(v) for v in obj]
        return type(obj)(items) if any(a is not b for a, b in zip(items, obj, strict=True)) else obj
    return obj


def _typed_array(v: np.ndarray) -> object:
    """plotly's to_typed_array_spec(v) for a numpy array, without its pass through narwhals (0.7 ms an array: most
    of a Heads grid's finish, 24 arrays): a numeric array of a dtype plotly.js reads is the same {dtype, bdata, shape};
    every other array (int64, bools, objects, empty, ...) goes through plotly's own function."""
    short = _SHORT_TYPES.get(str(v.dtype)) if v.size else None
    if short is None:
        return to_typed_array_spec(v)
    v = np.ascontiguousarray(v)
    spec = {"dtype": short, "bdata": base64.b64encode(v).decode("ascii")}
    if v.ndim > 1:
        spec["shape"] = str(v.shape)[1:-1]
    return spec


def _plain_vectors(trace: dict) -> dict:
    """The trace with every 1-D numeric array as a plain list (nested settings too, e.g. marker.color).

    Sent as a typed array, a 1-D array reaches plotly.js as a Float32Array, which its figure comparison (Plotly.react)
    does not count as an array: the chart's copy of the figure after its first draw then looks changed, and the
    chart is computed and drawn a second time. Larger arrays (heatmaps' z, the grid's per-cell customdata) arrive as
    rows in a plain array and stay typed (compact). The values are the same numbers (float32 widened exactly).
    """
    out = {}
    for k, v in trace.items():
        if isinstance(v, dict) and "bdata" in v and "," not in str(v.get("shape", "")):  # Plotly's typed array
            v = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
        elif isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "fiub":
            v = v.tolist()
        elif isinstance(v, dict):
            v = _plain_vectors(v)
        out[k] = v
    return out


def _pruned(d: dict) -> dict:
    """Without empty settings ("title": {}), as Plotly's own checks would leave it."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = _pruned(v)
            if not v:
                continue
        out[k] = v
    return out


def _title(layout: dict) -> str:
    title = layout.get("title")
    return (title.get("text") or "") if isinstance(title, dict) else str(title or "")


def _legend_shown(data: Sequence[dict], layout: dict) -> bool:
    if layout.get("showlegend") is not None:
        return bool(layout["showlegend"])
    if any(t.get("showlegend") is True for t in data):
        return True
    shown = [t for t in data if t.get("type", "scatter") in _LEGEND_TYPES and t.get("showlegend") is not False]
    return len(shown) > 1


def _axis_values(data: Sequence[dict], letter: str, name: str) -> list:
    """The values the traces put on this axis (for the labels it will show when it has no tickvals)."""
    ref = letter + name[5:]
    out: list = []
    for t in data:
        if t.get(letter + "axis", letter) != ref or t.get(letter) is None:
            continue
        v = t[letter]
        if isinstance(v, dict):  # a typed array {"dtype", "bdata"}: numbers
            out.append(0.0)
            continue
        out.extend(np.asarray(v, dtype=object).ravel().tolist())
    if not out and any(t.get(letter + "axis", letter) == ref and t.get("type") == "heatmap" for t in data):
        n = max((len(np.asarray(t["z"], dtype=object)) for t in data if "z" in t and not isinstance(t["z"], dict)),
                default=1000)  # fmt: skip
        out = [n]  # a heatmap with no x/y: its indices
    return out


def _labels(axis: dict, values: Callable[[], list]) -> list[str]:
    """The texts this axis will show (every tick text it may show: an estimate that errs long); ``values()``: the
    values the traces put on it, read only when the axis has no tick texts of its own."""
    if axis.get("showticklabels") is False:
        return []
    if axis.get("ticktext") is not None:
        return [str(v) for v in axis["ticktext"]]
    if axis.get("tickvals") is not None:
        return [_number(v) for v in axis["tickvals"]]
    values = values()
    strings = [v for v in values if isinstance(v, str)]
    if strings and axis.get("type") not in ("linear", "log"):
        return strings
    nums = [float(v) for v in values if isinstance(v, int | float | np.number) and np.isfinite(v)]
    if not nums:
        return ["-0.00"]
    return [_number(min(nums)), _number(max(nums)), "-0.00"]  # tick values between, with up to two decimals


def _number(v: object) -> str:
    if isinstance(v, float | np.floating):
        return f"{float(v):.3g}"
    return str(v)


@functools.lru_cache(maxsize=8192)  # a grid's panels repeat the same labels on each of their axes
def _text_px(text: str, size: float) -> tuple[float, float]:
    """(width, height) in pixels of a label as plotly.js draws it (tags dropped, entities shown, <br> lines)."""
    lines = [html.unescape(_TAG.sub("", part)) for part in re.split(r"<br\s*/?>", str(text), flags=re.I)]
    width = max((sum(_char_em(c) for c in line) for line in lines), default=0.0)
    return width * size, 1.3 * size * len(lines)


def _char_em(c: str) -> float:
    if unicodedata.east_asian_width(c) in "WF":
        return 1.05
    if c in _NARROW:
        return 0.38
    if c in _WIDE or c.isupper():
        return 0.8
    return 0.6


def _tick_size(axis: dict) -> float:
    return float((axis.get("tickfont") or {}).get("size") or TICK_FONT)


def _title_room(axis: dict) -> float:
    title = axis.get("title")
    text = title.get("text") if isinstance(title, dict) else title
    if not text:
        return 0.0
    if isinstance(title, dict):
        axis["title"] = title = dict(title)  # a copy: the figure's own dict stays as it was
        title.setdefault("standoff", STANDOFF)
        size = (title.get("font") or {}).get("size") or TITLE_FONT
    else:
        axis["title"] = {"text": text, "standoff": STANDOFF}
        size = TITLE_FONT
    return STANDOFF + 1.3 * size * (1 + str(text).lower().count("<br"))


def _ticks_len(axis: dict) -> float:
    return float(axis.get("ticklen", 5)) if axis.get("ticks") in ("inside", "outside") else 0.0


def _y_room(axis: dict, values: Callable[[], list]) -> float:
    labels = _labels(axis, values)
    size = _tick_size(axis)
    angle = math.radians(float(axis.get("tickangle") or 0) if axis.get("tickangle") != "auto" else 0.0)
    width = max((_extent(_text_px(s, size), angle, horizontal=True) for s in labels), default=0.0)
    room = width + _ticks_len(axis) + _title_room(axis)
    return room + PAD + SLACK if room else 10.0


def _x_room(axis: dict, values: Callable[[], list]) -> float:
    labels = _labels(axis, values)
    size = _tick_size(axis)
    sizes = [_text_px(s, size) for s in labels]
    if axis.get("tickangle") in (None, "auto") and sizes:
        axis["tickangle"] = _angle_for(sizes, axis)  # fixed, so the estimate is the angle drawn
    angle = math.radians(float(axis.get("tickangle") or 0))
    height = max((_extent(s, angle, horizontal=False) for s in sizes), default=0.0)
    room = height + _ticks_len(axis) + _title_room(axis)
    return room + PAD + SLACK if room else 10.0


def _angle_for(sizes: Sequence[tuple[float, float]], axis: dict) -> int:
    """Level labels while they fit side by side on a narrow axis (about 300 px per label set), else vertical."""
    if axis.get("type") not in ("category", None) or len(sizes) <= 1:
        return 0
    span = axis.get("domain") or [0.0, 1.0]
    px = 300 * max(0.2, float(span[1]) - float(span[0]))
    each = px / len(sizes)
    return 0 if max(w for w, _ in sizes) + 6 <= each else -90


def _extent(size: tuple[float, float], angle: float, horizontal: bool) -> float:
    """How far a rotated label reaches away from its axis (across it)."""
    w, h = size
    s, c = abs(math.sin(angle)), abs(math.cos(angle))
    return w * c + h * s if horizontal else w * s + h * c


def _colorbar_room(data: Sequence[dict], layout: dict) -> float:
    """Room on the right for the colour bars drawn beside the plot (those with no x of their own)."""
    room = 0.0
    for bar in _colorbars(data, layout):
        if bar.get("orientation") == "h" or (bar.get("x") is not None and float(bar["x"]) < 1.0):
            continue  # below the plot, or inside it
        size = float((bar.get("tickfont") or {}).get("size") or TICK_FONT)
        ticks = max(_text_px(s, size)[0] for s in ("-0.00", "0.0004"))  # look.TICK_FORMAT's widest usual label
        title = bar.get("title")
        text = title.get("text") if isinstance(title, dict) else title
        tsize = float(((title or {}).get("font") or {}).get("size") or TITLE_FONT) if isinstance(title, dict) else 14
        words = _text_px(text, tsize)[0] if text else 0.0
        x = float(bar.get("x", 1.02))
        room = max(
            room,
            (x - 1.0) * 900 + float(bar.get("xpad", COLORBAR_W["xpad"])) + float(bar.get("thickness", 30))
            + max(ticks + 4, words) + 2 * SLACK,
        )  # fmt: skip
    return room


def _colorbar_below(data: Sequence[dict], layout: dict) -> float:
    """Room under the plot for horizontal colour bars placed below it (y < 0)."""
    plot_h = max(100.0, float(layout.get("height") or 450) - 150)
    room = 0.0
    for bar in _colorbars(data, layout):
        if bar.get("orientation") == "h" and float(bar.get("y", 1.0)) < 0:
            size = float((bar.get("tickfont") or {}).get("size") or TICK_FONT)
            room = max(room, -float(bar["y"]) * plot_h + float(bar.get("thickness", 30)) + 1.3 * size + 2 * SLACK)
    return room


def _colorbars(data: Sequence[dict], layout: dict) -> Iterable[dict]:
    for t in data:
        if t.get("type") not in ("heatmap", "contour", "histogram2d", "scatter", "bar") or t.get("showscale") is False:
            continue
        if t.get("coloraxis"):
            continue
        if t.get("type") in ("scatter", "bar"):
            if (t.get("marker") or {}).get("showscale"):
                yield (t["marker"].get("colorbar") or {})
            continue
        yield t.get("colorbar") or {}
    for name in [k for k in layout if re.fullmatch(r"coloraxis\d*", k)]:
        ax = layout[name]
        if ax.get("showscale") is not False:
            yield {**COLOR_AXIS["colorbar"], **(ax.get("colorbar") or {})}  # figures.look's colour axis


class AsBuilt(BaseFigure):
    """A finished figure's dict, handed to st.plotly_chart as a figure object so that it is sent as it is.

    Given a dict, Streamlit rebuilds it as a go.Figure to check it (plotly.tools.return_figure_from_figure_or_data
    with validate_figure=True): a third of a rerun's time for the heads grid. A figure object is taken through
    to_dict() unchecked. Ours were built, hence checked, as go.Figure objects by figures.*, and finish() only sets
    layout values that exist (tests/test_finish.py checks that the dict sent equals the checked one).
    """

    def __init__(self, spec: Finished) -> None:  # BaseFigure's own set-up is not needed
        object.__setattr__(self, "_spec", spec)

    def to_dict(self) -> dict:
        return self._spec

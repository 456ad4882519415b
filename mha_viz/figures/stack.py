"""Rows of matrices stacked into one chart: Step by step's eleven matrices as one chart instead of six.

Each row is a finished figures.heatmap.matrix_pair figure (a pair, or one matrix alone drawn the same way); the rows
keep their heights in pixels, their margins (finish() fitted each row's tick labels), their panel titles, colour bars
and hovers, one below the other. The browser lays out and draws one chart, not six (issue 36 §6: the tab's browser
time was 4.5 × a bare Streamlit page's redraw).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mha_viz.figures.finish import Finished

PANELS = "matrix panels"  # layout.meta of a stacked chart: a reader splits it into its panels by their axes
_AXIS = re.compile(r"([xy])axis(\d*)")


def stacked(rows: Sequence[Finished]) -> Finished:
    """The finished rows (matrix_pair figures, each with axes x/y and maybe x2/y2) as one finished chart."""
    height = sum(int(r["layout"]["height"]) for r in rows)
    left = max(int(r["layout"]["margin"]["l"]) for r in rows)
    right = max(int(r["layout"]["margin"]["r"]) for r in rows)
    layout = {k: v for k, v in rows[0]["layout"].items() if not _AXIS.fullmatch(k)}
    data, annotations, offset, top = [], [], 0, 0.0
    for row in rows:
        lay = row["layout"]
        h, margin = float(lay["height"]), lay["margin"]
        y1 = 1 - (top + margin["t"]) / height  # the row's plot area, in the whole chart's paper
        y0 = 1 - (top + h - margin["b"]) / height
        names = sorted({m.group(2) for k in lay if (m := _AXIS.fullmatch(k))}, key=lambda n: int(n or 1))
        new = {n: _number(offset + int(n or 1)) for n in names}  # this row's axis numbers in the chart
        for n in names:
            xa, ya = dict(lay["xaxis" + n]), dict(lay["yaxis" + n])
            xa["anchor"], ya["anchor"] = "y" + new[n], "x" + new[n]
            ya["domain"] = [max(0.0, y0), min(1.0, y1)]
            layout["xaxis" + new[n]], layout["yaxis" + new[n]] = xa, ya
        for t in row["data"]:
            t = dict(t)
            for letter in "xy":
                t[letter + "axis"] = letter + new[t.get(letter + "axis", letter)[1:]]
            if isinstance(t.get("colorbar"), dict) and t["colorbar"].get("orientation") == "h":
                t["colorbar"] = t["colorbar"] | {"y": y1 + 6 / height}  # above its panel, as in the row
            data.append(t)
        for a in lay.get("annotations", ()):
            annotations.append(a | {"y": y1} if a.get("yref") == "paper" and a.get("y") == 1 else a)
        offset += len(names)
        top += h
    layout |= {
        "annotations": annotations,
        "height": height,
        "margin": {**rows[0]["layout"]["margin"], "l": left, "r": right, "t": 0, "b": 0},
        "meta": PANELS,
    }
    return Finished(data=data, layout=layout)


def _number(i: int) -> str:
    return "" if i == 1 else str(i)  # plotly's first axes are x and y (xaxis, yaxis), then x2, y2...

"""Two sentences' shown head: its pattern in the first and in the second sentence as ONE chart of two panels.

Drawn as two charts they were two of the tab's five (issue 36 §6: Streamlit draws every chart twice, so a tab
switch's browser time grows with its charts). Each panel is figures.heatmap.matrix_spec's matrix as it was (the same
weights, hover, colour scale and title); figures.heatmap.matrix_pair puts them side by side. The two sentences'
tokens differ (the swapped word), so the second panel keeps its own row labels, on its right side.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mha_viz.figures.heatmap import matrix_pair, matrix_spec

PAIR_WIDTH = 520  # px: about one panel's width at a 1280 px page (its token labels are thinned to fit it)
LABEL_PX = 7.5  # px per character of a 12 px tick label (an estimate that errs wide, like figures.finish's)


def two_patterns(
    first: np.ndarray,
    second: np.ndarray,
    keys: tuple[Sequence[str], Sequence[str]],
    queries: tuple[Sequence[str], Sequence[str]],
    titles: tuple[str, str],
) -> dict:
    """The two patterns side by side (a plain dict, as matrix_pair makes of two matrix_spec dicts): the first's rows
    labelled on the left, the second's on the right. Shapes: first [n_q1, n_k1], second [n_q2, n_k2]; keys and
    queries: each sentence's key and query labels."""
    specs = [
        matrix_spec(z, k, q, t, value_name="weight", attention=True, width=PAIR_WIDTH)
        for z, k, q, t in zip((first, second), keys, queries, titles, strict=True)
    ]
    pair = matrix_pair(*specs)
    layout = dict(pair["layout"])
    right = specs[1]["layout"]["yaxis"]
    layout["yaxis2"] = {**right, "anchor": "x2", "side": "right"}  # its own tokens: not the first sentence's
    shown = right.get("ticktext") or [str(v) for v in queries[1]]
    room = LABEL_PX * max((len(str(s)) for s in shown), default=1) + 16
    if (right.get("title") or {}).get("text"):
        room += 24  # the "every k-th label" note beside them
    layout["margin"] = {**layout["margin"], "r": int(room)}
    return {"data": pair["data"], "layout": layout}

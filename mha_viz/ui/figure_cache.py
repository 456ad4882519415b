"""Matrices drawn two to a row (Step by step, the variant's matrices), built once per set of values and kept
finished: a head, layer or tab seen before is drawn again from here, and a first visit builds plain dicts
(figures.heatmap.matrix_spec), never plotly objects (issue 36 §6: plotly's checks and copies of eleven matrices were
most of Step by step's page run)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mha_viz.figures.finish import Finished, finish
from mha_viz.figures.heatmap import in_pairs, matrix_pair, matrix_spec
from mha_viz.figures.stack import stacked
from mha_viz.ui.memo import sized_cache

# one matrix: matrix_spec's positional arguments (z, x labels or None, y labels, title) and its keyword arguments
Panel = tuple[tuple[np.ndarray, tuple[str, ...] | None, tuple[str, ...], str], dict[str, object]]


def panel(z: np.ndarray, x: Sequence[str] | None, y: Sequence[str], title: str, **kwargs: object) -> Panel:
    """One matrix for finished_pairs (labels as tuples: hashed as they are). Shapes: z [rows, cols]."""
    return (z, None if x is None else tuple(x), tuple(y), title), kwargs


@sized_cache(max_entries=64, max_mb=48)
def finished_pairs(panels: tuple[Panel, ...]) -> tuple[tuple[int, Finished, bool], ...]:
    """figures.heatmap.in_pairs of the panels' matrix_spec figures, each finished: (index of its first matrix, the
    figure, whether it is a pair). Keyed on the values themselves (a digest of each array), so a hit is exact."""
    specs = [matrix_spec(*args, **kwargs) for args, kwargs in panels]
    return tuple((j, finish(fig), pair) for j, fig, pair in in_pairs(specs))


@sized_cache(max_entries=32, max_mb=48)
def finished_stack(panels: tuple[Panel, ...]) -> Finished:
    """The panels two to a row as finished_pairs draws them (one alone drawn as a pair's left half), stacked into
    one chart (figures.stack: the browser draws one chart, not one per row). Keyed on the values, as finished_pairs."""
    specs = [matrix_spec(*args, **kwargs) for args, kwargs in panels]
    return stacked([finish(fig if pair else matrix_pair(fig, None)) for _, fig, pair in in_pairs(specs)])

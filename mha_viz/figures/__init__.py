"""Plotly figures from traces and analysis: the only package that imports plotly (no Streamlit here).

Arrays go to Plotly as numpy float32 (serialised as compact typed arrays, never Python lists).
Attention heatmaps put query tokens on y (top to bottom) and key tokens on x; labels must be
distinct (see models.tokens.distinct_labels) or a categorical axis would merge repeated words.

One module per kind of figure: common (scales, hover templates, pooling, escaping), grids (heads_grid,
overview), heatmap (matrix_heatmap), roles (roles_map), corpus (corpus_map, clark_lines),
induction (induction_map, loss_lines),
maps (layer_head_values), bars (focus_bars, head_bars, token_bars, paired_bars, line_chart),
importance (pruning_figure, spectra),
lesson (scores_heatmap, comparison, wo_heatmap),
lines (attention_lines: token-to-token lines, with select_lines choosing what they draw).
Every public name is re-exported here, so callers import from mha_viz.figures.
"""

from mha_viz.figures.bars import (
    FOCUS_TOP_KEYS,
    focus_bars,
    head_bars,
    line_chart,
    paired_bars,
    paired_bars_rows,
    token_bars,
)
from mha_viz.figures.common import (
    CELL_HOVER,
    CLICK_OVERLAY_MAX_CELLS,
    DIVERGING,
    GRID_MAX_CELLS,
    POOLED_HOVER,
    SEQUENTIAL,
    WEIGHT_HOVER,
    block_labels,
    pool_blocks,
    safe,
)
from mha_viz.figures.corpus import clark_lines, corpus_map
from mha_viz.figures.grids import heads_grid, overview
from mha_viz.figures.heatmap import matrix_heatmap
from mha_viz.figures.importance import pruning_figure, spectra
from mha_viz.figures.induction import induction_map, loss_lines
from mha_viz.figures.lens import logit_lens
from mha_viz.figures.lesson import MAX_WO_CELLS, comparison, scores_heatmap, wo_heatmap
from mha_viz.figures.lines import (
    LINE_THRESHOLD,
    MAX_LINE_HEADS,
    MAX_ROWS,
    MAX_SEGMENTS,
    LineSet,
    attention_lines,
    select_lines,
    strongest_head,
    token_window,
)
from mha_viz.figures.maps import layer_head_values
from mha_viz.figures.roles import ROLE_COLOURS, role_colours, roles_map

__all__ = [
    "CELL_HOVER",
    "CLICK_OVERLAY_MAX_CELLS",
    "DIVERGING",
    "FOCUS_TOP_KEYS",
    "GRID_MAX_CELLS",
    "LINE_THRESHOLD",
    "MAX_LINE_HEADS",
    "MAX_ROWS",
    "MAX_SEGMENTS",
    "MAX_WO_CELLS",
    "POOLED_HOVER",
    "ROLE_COLOURS",
    "SEQUENTIAL",
    "WEIGHT_HOVER",
    "LineSet",
    "attention_lines",
    "block_labels",
    "clark_lines",
    "comparison",
    "corpus_map",
    "focus_bars",
    "head_bars",
    "heads_grid",
    "induction_map",
    "layer_head_values",
    "line_chart",
    "logit_lens",
    "loss_lines",
    "matrix_heatmap",
    "overview",
    "paired_bars",
    "paired_bars_rows",
    "pool_blocks",
    "pruning_figure",
    "role_colours",
    "roles_map",
    "safe",
    "scores_heatmap",
    "select_lines",
    "spectra",
    "strongest_head",
    "token_bars",
    "token_window",
    "wo_heatmap",
]

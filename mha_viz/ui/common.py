"""Helpers shared by the views: what to display, how to plot, how to export."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import streamlit as st

from mha_viz.analysis import csv_cells

if TYPE_CHECKING:  # only figures/ imports plotly
    import plotly.graph_objects as go

from mha_viz.analysis.norms import shown_pattern
from mha_viz.analysis.patterns import drop_special
from mha_viz.figures import (
    comparison,
    focus_bars,
    layer_head_values,
    line_chart,
    paired_bars,
    paired_bars_rows,
    scores_heatmap,
    token_bars,
)
from mha_viz.figures.finish import AsBuilt, finish
from mha_viz.figures.grids import heads_grid_spec
from mha_viz.figures.heatmap import matrix_spec
from mha_viz.figures.variants import before_after, cache_curve
from mha_viz.figures.wo_pair import change_and_contributions
from mha_viz.trace import AttentionTrace
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.timing import timed_plot


@dataclass(frozen=True)
class Shown:
    """A pattern stack ready to draw, after the "hide special tokens" choice."""

    pattern: np.ndarray  # [h, m_q, m_k] float32
    labels: tuple[str, ...]  # [m_q] query labels
    key_labels: tuple[str, ...]  # [m_k]
    keep: np.ndarray  # [m_q] indices into the full query token list
    note: str


def shown(
    pattern: np.ndarray,
    labels: Sequence[str],
    special: Sequence[bool],
    hide: bool,
    key_labels: Sequence[str] | None = None,
    key_special: Sequence[bool] | None = None,
) -> Shown:
    """Shapes: pattern [h, n_q, n_k]; labels, special [n_q]; key_labels, key_special [n_k] (default: the same)."""
    pattern = np.asarray(pattern, dtype=np.float32)
    key_labels = tuple(labels if key_labels is None else key_labels)
    key_special = special if key_special is None else key_special
    whole = Shown(pattern, tuple(labels), key_labels, np.arange(len(labels)), "")
    if not hide or not (any(special) or any(key_special)):
        return whole
    sub, keep, keep_k = drop_special(pattern, np.asarray(special), np.asarray(key_special))
    if keep.size == 0 or keep_k.size == 0:
        return whole
    note = "Special tokens hidden: each row is renormalised to sum to 1 over the remaining tokens."
    return Shown(sub, tuple(labels[i] for i in keep), tuple(key_labels[i] for i in keep_k), keep, note)


def trace_shown(
    trace: AttentionTrace, special: Sequence[bool], hide: bool, key_special: Sequence[bool], measure: str = "weight"
) -> Shown:
    """The trace's weights (or row-normalised contributions, see norms.shown_pattern) ready to draw."""
    return shown(shown_pattern(trace, measure), trace.tokens, special, hide, trace.key_tokens, key_special)


@sized_cache(max_entries=128, max_mb=64)
def cached_figure(builder: str, *args: object, **kwargs: object) -> dict:
    """A figure (built by figures.<builder>), kept finished as its JSON-ready dict.

    Building a Plotly figure costs more than everything else in a rerun (make_subplots with a dozen panels most of
    all); a layer, head or tab seen before is drawn again from here. Keys are the plain data (arrays, label tuples,
    settings), so hits are exact. The dict is finished (figures.finish: margins fitted, no template), so plot() sends
    it as it is; it is shared, and nothing changes it.
    """
    return finish(FIGURE_BUILDERS[builder](*args, **kwargs))


FIGURE_BUILDERS: dict[str, Callable[..., go.Figure]] = {
    "heads_grid": heads_grid_spec,  # heads_grid's chart as a plain dict: no plotly objects (tests/test_figure_speed)
    "focus_bars": focus_bars,
    "matrix_heatmap": matrix_spec,  # matrix_heatmap's chart as a plain dict: no plotly checks (tests/test_figure_speed)
    "scores_heatmap": scores_heatmap,
    "line_chart": line_chart,
    "comparison": comparison,
    "token_bars": token_bars,
    "paired_bars": paired_bars,
    "paired_bars_rows": paired_bars_rows,  # Two sentences' two paired charts as one
    "variants_before_after": before_after,  # Variants' heads before and after sharing K/V
    "variants_cache_curve": cache_curve,  # Variants' output change against the KV cache
    "wo_change_and_contributions": change_and_contributions,  # W^O's change per token over the heads' contributions
    "layer_head_values": layer_head_values,
}


_DRAWN: ContextVar[dict | None] = ContextVar("mha_viz_drawn", default=None)  # figures plot() drew in this view run
DRAWN_KEY = "_mha_viz_drawn"  # the same dict in the session: a fragment's rerun (outside the view run) updates it


@contextmanager
def recording_figures() -> Iterator[dict[str, go.Figure | dict]]:
    """Collect every figure plot() draws inside the block, by chart key (for the view's HTML download). A later
    fragment rerun of part of the view replaces its figures in the same dict, so the download stays current."""
    drawn: dict[str, go.Figure | dict] = {}
    st.session_state[DRAWN_KEY] = drawn
    token = _DRAWN.set(drawn)
    try:
        yield drawn
    finally:
        _DRAWN.reset(token)


def forget_figures(prefix: str) -> None:
    """Drop the figures whose chart key starts with ``prefix`` from the view's .html download (a fragment that
    draws only some of its figures, e.g. the Lesson's open steps, calls it first; a full run starts empty)."""
    drawn = _DRAWN.get()
    if drawn is None:
        drawn = st.session_state.get(DRAWN_KEY)
    for key in [k for k in drawn or () if k.startswith(prefix)]:
        del drawn[key]


def plot(
    fig: go.Figure | dict, key: str, image_format: str, on_select: Callable | str = "ignore",
    selection_mode: str = "points",
) -> object:  # fmt: skip
    """st.plotly_chart with the toolbar's image download in the chosen format (png or svg); a callable ``on_select``
    is called on a selection of ``selection_mode`` ("points", or "box": a box drawn on the chart)."""
    config = {
        "displaylogo": False,
        "toImageButtonOptions": {"format": image_format, "filename": f"mha-viz-{key}", "scale": 2},
    }
    kwargs = {"on_select": _never_raises(on_select), "selection_mode": selection_mode} if callable(on_select) else {}
    drawn = _DRAWN.get()
    if drawn is None:  # a fragment's rerun: the view's dict from its last full run
        drawn = st.session_state.get(DRAWN_KEY)
    if drawn is not None:
        drawn[key] = fig
    with timed_plot():
        spec = AsBuilt(finish(fig))
        # theme=None: the look is in the figure (figures.look), so the chart is drawn once, not twice
        return st.plotly_chart(spec, key=key, config=config, width="stretch", theme=None, **kwargs)


def _never_raises(callback: Callable[[], None]) -> Callable[[], None]:
    """A click callback that cannot take the page down: an odd selection event is logged and ignored."""

    def run() -> None:
        try:
            callback()
        except Exception:
            logging.getLogger("mha_viz").exception("ignored a selection event that could not be read")

    return run


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def csv_bytes(header: Sequence[str], rows: Sequence[Sequence[object]]) -> bytes:
    buf = io.StringIO()
    writer = csv_cells.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def downloads(
    key: str, npz: dict[str, np.ndarray] | None = None, csv_data: bytes | Callable[[], bytes] | None = None
) -> None:
    """Download buttons for a view's data (.npz arrays and/or a .csv table).

    The files are built when a button is clicked, not on every rerun: Streamlit calls the callable then (on its
    own thread; the arrays are the frozen ones this run drew). ``csv_data`` may be such a callable too. A click
    does not rerun the page. One button goes on the page itself: four columns for it were five more blocks for the
    browser to lay out on every switch (issue 36 §6)."""
    cols = st.columns(4) if npz is not None and csv_data is not None else (st, st)
    if npz is not None:
        arrays = dict(npz)
        cols[0].download_button(
            "Download data (.npz)",
            lambda: npz_bytes(arrays),
            file_name=f"mha-viz-{key}.npz",
            mime="application/octet-stream",
            key=f"dl-npz-{key}",
            on_click="ignore",
        )
    if csv_data is not None:
        cols[1].download_button(
            "Download table (.csv)",
            csv_data,
            file_name=f"mha-viz-{key}.csv",
            mime="text/csv",
            key=f"dl-csv-{key}",
            on_click="ignore",
        )


def head_names(n: int) -> list[str]:
    return [f"head {i}" for i in range(n)]


def kept_input(where, label: str, key: str, default: str, max_chars: int) -> str:
    """A text box whose value outlives the runs that do not draw it. Streamlit forgets a widget's value in a run
    that does not draw it (another tab open), so the box would come back empty; its last value is kept under a
    shadow key and put back. ``where`` is st or a column."""
    shadow = f"_kept_{key}"
    if key not in st.session_state:
        st.session_state[key] = st.session_state.get(shadow, default)
    value = where.text_input(label, key=key, max_chars=max_chars)
    st.session_state[shadow] = value
    return value


def layer_head_map(
    values: np.ndarray,
    title: str,
    value_name: str,
    key: str,
    image_format: str,
    on_select: Callable[[], None] | None = None,
    diverging: bool = False,
) -> None:
    """One number per layer × head as a heatmap (rows L0…, columns H0…); with ``on_select``, a click on a cell
    calls it (read the cell with choices.clicked_points(key): customdata (layer, head, value)).
    Shapes: values [L, H]."""
    fig = cached_figure("layer_head_values", values, title, value_name, diverging=diverging)  # a view seen before
    plot(fig, key, image_format, on_select=on_select or "ignore")

"""The dashboard's "Download this view (.html)" button: plot() records the run's figures; every view gets one."""

from __future__ import annotations

import re

import pytest
from apptest_helpers import assert_clean, run_app

from mha_viz.figures import matrix_heatmap
from mha_viz.ui.common import plot, recording_figures

LABEL = "Download this view (.html)"


def test_plot_records_the_view_runs_figures_and_a_fragments_rerun_replaces_them():
    import streamlit as st

    from mha_viz.ui.common import DRAWN_KEY

    st.session_state.pop(DRAWN_KEY, None)
    a, b, c = matrix_heatmap([[0.5, 0.5]]), matrix_heatmap([[1.0, 0.0]]), matrix_heatmap([[0.2, 0.8]])
    plot(a, "before", "png")  # no view has run: drawn, not kept anywhere
    with recording_figures() as drawn:
        plot(a, "one", "png")
        plot(b.to_plotly_json(), "two", "svg")
    assert list(drawn) == ["one", "two"] and drawn["one"] is a and drawn["two"]["data"][0]["z"] is not None
    plot(c, "one", "png")  # a fragment's rerun (outside the view run) redraws chart "one": the page follows
    assert list(drawn) == ["one", "two"] and drawn["one"] is c


@pytest.mark.parametrize("view", ["Heads", "Step by step", "Overview"])
def test_every_view_offers_its_html(view):
    at = run_app(view=view)
    assert_clean(at)
    buttons = [b for b in at.get("download_button") if b.proto.label == LABEL]
    assert len(buttons) == 1, [b.proto.label for b in at.get("download_button")]
    assert at.get("plotly_chart"), "the view drew figures to put in the page"


def test_the_heads_page_holds_the_drawn_figures_and_settings(monkeypatch):
    """Click-time content: the deferred callable the button registered, run as Streamlit would on a click."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    made: dict[str, object] = {}
    original = MediaFileManager.add_deferred

    def keep(self, data_callable, mimetype, coordinates, file_name=None, **kw):
        made[str(file_name)] = data_callable
        return original(self, data_callable, mimetype, coordinates, file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add_deferred", keep)
    at = run_app(view="Heads", layer="5", text="<b>it</b> was the animal")
    assert_clean(at)
    doc = made["mha-viz-heads.html"]().decode("utf-8")
    charts = at.get("plotly_chart")
    assert doc.count("Plotly.newPlot") == len(charts) >= 3  # grid, opened head, focus strip, bars
    assert len(re.findall(r"\* plotly\.js v\d", doc)) == 1 and "<script src" not in doc
    assert "&lt;b&gt;it&lt;/b&gt; was the animal" in doc and "<b>it</b>" not in doc
    assert "<dt>view</dt><dd>Heads</dd>" in doc and "<dt>attention</dt><dd>layer 5</dd>" in doc

"""A cold server's first page, sooner: the bundled model starts loading while the sidebar is drawn, and the
browser fetches Plotly's code while the model loads.

Measured (benchmarks/bench_browser.py part 1): importing transformers' modeling code is ~2 s of the ~2.4 s
model load, and the browser asks for Plotly's chart code (a large chunk) only when the first chart arrives.
Under `streamlit run app.py` the load starts earlier still, with the server (mha_viz/serve/start.py); the
page's thread here then only waits for it (it covers runs without that start: AppTest, MHA_VIZ_NO_PRELOAD).
"""

from __future__ import annotations

import contextlib
import threading

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from mha_viz.figures.finish import AsBuilt, Finished
from mha_viz.ui.cache import get_model

_STARTED = threading.Event()
_PRELOADED = "_mha_viz_plotly_preloaded"
# the empty chart every session's first page sends, built once: handed over as a figure object (AsBuilt), Streamlit
# sends it as it is; a dict it would rebuild as a checked go.Figure, with plotly's template, on every first page
_PRELOAD_CHART = Finished(
    data=[{"type": "scatter", "x": [], "y": []}],
    layout={"height": 10, "width": 10, "margin": {"l": 0, "r": 0, "t": 0, "b": 0}},
)


def _default_page() -> bool:
    """The page asks for the bundled model on the CPU (the default, and what the first visit shows)."""
    params = st.query_params
    return params.get("src", "bundled") == "bundled" and params.get("device", "cpu") == "cpu"


def start_model_load() -> None:
    """Load the bundled model in a background thread, once per process, when this page will want it and it
    is not loaded yet. get_model's cache holds a lock per key: the page's own call waits for this load."""
    if _STARTED.is_set() or not _default_page():
        return
    _STARTED.set()
    thread = threading.Thread(target=_load, name="mha-viz-warm", daemon=True)
    add_script_run_ctx(thread, get_script_run_ctx())
    thread.start()


def _load() -> None:
    with contextlib.suppress(Exception):  # the page's own call reports any error to the person
        get_model("", "cpu")


def preload_plotly() -> st.delta_generator.DeltaGenerator | None:
    """Draw an empty, tiny chart once per browser session, so that the browser loads Plotly's code while the
    server works; returns its placeholder (empty it when the page's charts are drawn), or None."""
    if st.session_state.get(_PRELOADED):
        return None
    st.session_state[_PRELOADED] = True
    slot = st.empty()
    slot.plotly_chart(AsBuilt(_PRELOAD_CHART), config={"staticPlot": True}, width="content")
    return slot

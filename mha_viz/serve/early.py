"""A cold server's first page: the browser fetches Plotly's code while the server still imports torch and
transformers (issue 36 §6).

Streamlit's browser code loads Plotly's chart code (a large chunk of JavaScript) only when the first chart
arrives. Each page run waits for the preload's imports (start.import_heavy) before the dashboard can draw
anything, so on a cold server the browser sat idle for those seconds and then fetched and compiled Plotly's code
after them, on the way to the first heatmap. Here a page that would wait first draws a tiny, static, empty chart
(once per session), then waits, then removes it: the browser loads Plotly's code on its other core meanwhile.
The chart waits for start.import_charts (plotly and what plotly reads from sys.modules, whole) so no half-imported
module is ever read; its lists hold numbers only, so plotly's JSON encoder never looks at a module the preload may
be importing (PIL, sage).

ui/warm.py's preload_plotly does the same once the dashboard runs; it covers runs without a server preload
(AppTest, MHA_VIZ_NO_PRELOAD=1), where this draws nothing.
"""

from __future__ import annotations

from mha_viz.serve import start

SENT = "_mha_viz_early_chart"  # session state: this session's first page drew it
# 1 × 1 points drawn nowhere: a plain dict (Streamlit checks it as a go.Figure; plotly's own pandas is whole by then)
CHART = {
    "data": [{"type": "scatter", "x": [0], "y": [0], "mode": "markers", "marker": {"opacity": 0}}],
    "layout": {"height": 10, "width": 10, "margin": {"l": 0, "r": 0, "t": 0, "b": 0}},
}


def page_imports() -> None:
    """What a page run does before it imports the dashboard: start.import_heavy(), with the early chart drawn
    while it waits when the server's preload is still importing. A default request on a cold server gets the
    stored first page instead (light.py: no torch imported for it), kept until the model is loaded and the stored
    page checked (start.PAGE_CHECKED), then emptied as the live page draws."""
    from mha_viz.serve import light  # (numpy only after the preload's charts: light.first_page)

    slot = light.first_page((SENT,)) if start.started() and not start.PAGE_CHECKED.is_set() else None
    drawn = slot is not None
    if slot is None and start.started() and start.importing():
        slot = _early_chart()
    start.import_heavy()
    if drawn:
        start.PAGE_CHECKED.wait()  # the live page then draws at once: its model and first screen are ready
    if slot is not None:
        slot.empty()


def _early_chart() -> object | None:
    import streamlit as st

    if st.session_state.get(SENT):
        return None
    st.session_state[SENT] = True
    start.import_charts()  # plotly, pandas, numpy whole before a chart reads them
    slot = st.empty()
    slot.plotly_chart(CHART, config={"staticPlot": True}, width="content", theme=None)
    return slot

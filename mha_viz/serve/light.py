"""A cold server's first page drawn from the stored recording (issue 36 §6), by code that imports neither torch nor
transformers: the default page's title, the Lesson's first words and its first map, with a note that the controls
appear once the model is loaded. No widget is drawn here, so no widget state has to carry over to the live page.

early.page_imports() calls first_page() in a page run that would wait for the preload; the page it draws is in one
slot, which page_imports empties once the model is loaded and the stored page checked, just before the live page
draws (in the same run). Drawn only for a default request: a new session (nothing chosen in its state) with no
query string, once per session, from a store whose key matches (page_store.usable).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mha_viz.serve import start

if TYPE_CHECKING:
    from mha_viz.serve.page_store import Stored

LIGHT = "_mha_viz_light_page"  # session state: this session's first page was drawn from the store
KEY = "light_first"  # the stored map's chart key (the live page's map is "lesson_first")
NOTE = "A first look, recorded from this model: the controls and the other steps appear as soon as it is loaded."
SIDEBAR_TITLE = "mha-viz"  # the live sidebar's header (ui/sidebar.py): the sidebar is there from the first page on
SIDEBAR_NOTE = "The controls appear here as soon as the model is loaded."
log = logging.getLogger("mha_viz.serve.light")


def default_request(own_keys: tuple[str, ...] = ()) -> bool:
    """Whether this run is a default page: no query string, and nothing in the session but our own marks."""
    import streamlit as st

    return not st.query_params.to_dict() and all(k in own_keys for k in st.session_state)


def first_page(own_keys: tuple[str, ...] = ()) -> Slots | None:
    """Draw the stored first page when this run is a default request and the store is usable; returns its slots
    (empty them when the live page draws), else None (nothing drawn)."""
    import streamlit as st

    if st.session_state.get(LIGHT) or not default_request(own_keys):
        return None
    start.import_charts()  # numpy, pandas, plotly whole (start.py) before the store (numpy) and a chart read them
    from mha_viz.serve import page_store

    stored = page_store.usable()
    if stored is None:
        return None
    try:
        fig = figure(stored)
        page = stored.page
        texts = [page["title"], page["header"], page["intro"], *page["captions"]]
        columns = [int(c) for c in page["columns"]]
        if not all(isinstance(t, str) for t in texts) or len(columns) != 2:
            raise ValueError("its texts are not strings, or its columns not two")
    except (KeyError, TypeError, ValueError) as e:
        log.warning("the stored first page is not drawn: %s", str(e).splitlines()[0][:300])
        return None
    st.session_state[LIGHT] = True
    st.set_page_config(page_title=page["title"], layout="wide")
    # the sidebar first, so the live page's does not push the page aside when it comes (the layout stays put)
    side = st.sidebar.empty()
    with side.container():
        st.header(SIDEBAR_TITLE)
        st.caption(SIDEBAR_NOTE)
    slot = st.empty()
    with slot.container():
        st.subheader(page["header"])
        st.caption(NOTE)
        intro, first = st.columns(columns)
        intro.markdown(page["intro"])
        for caption in page["captions"]:
            intro.caption(caption)
        with first:
            st.plotly_chart(fig, key=KEY, config={"displaylogo": False}, width="stretch", theme=None)
    return Slots((side, slot))


class Slots(tuple):
    """The stored page's places (its sidebar, its main column): empty() empties them all, as the live page draws."""

    def empty(self) -> None:
        for slot in self:
            slot.empty()


def figure(stored: Stored) -> object:
    """The stored map built as the live page builds it (ui.common.cached_figure's matrix_heatmap, finished, its row
    outlined: ui/views/lesson.first_figure), from the stored matrix, labels and settings."""
    from mha_viz.figures.finish import AsBuilt, finish
    from mha_viz.figures.heatmap import matrix_spec
    from mha_viz.figures.lesson import mark_row

    spec = stored.page["figure"]
    if spec["builder"] != "matrix_heatmap":
        raise ValueError(f"its map's builder is {spec['builder']!r}, not matrix_heatmap")
    x = None if spec["x"] is None else tuple(spec["x"])
    fig = finish(matrix_spec(stored.matrix, x, tuple(spec["y"]), spec["title"], **spec["kwargs"]))
    if spec["mark"] is not None:
        row, label = spec["mark"]
        fig = mark_row(fig, int(row), str(label))
    return AsBuilt(fig)

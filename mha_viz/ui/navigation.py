"""Which view is open: the group picker (Learn, Look, Explain, What if) above the group's tabs, the view in the
session and in the link (?view=), and their on_change callbacks; ui/__init__.py draws the page around it."""

from __future__ import annotations

import streamlit as st

from mha_viz.ui.sidebar import GROUP_OF, VIEW_GROUPS, VIEWS, url_value


def to_group() -> None:
    """The group picker's on_change: open the group's first view (its tabs then show)."""
    group = st.session_state.get("view_group")
    if group in VIEW_GROUPS:
        set_view(VIEW_GROUPS[group][0])


def to_tab(key: str) -> None:
    """A tab's on_change: that view is the one open."""
    set_view(st.session_state[key])


def set_view(view: str) -> None:
    """The open view, in the session and in the link (?view=, left out for the first view)."""
    st.session_state["view"] = view
    # written only when it changes: a write sends the whole link, and would undo a bound widget's own update
    # made in the same run (the Rollout slider's rollout_layer)
    if view == VIEWS[0]:
        if "view" in st.query_params:
            del st.query_params["view"]
    elif st.query_params.get("view") != view:
        st.query_params["view"] = view


def wanted_view() -> str:
    """The view to open: a click that opened a head elsewhere or the user's pick, else a link's ?view=."""
    return st.session_state.get("view") or url_value("view") or VIEWS[0]


def navigation() -> tuple[str, tuple[str, ...]]:
    """The view to open (wanted_view) and its group's views, with the group picker drawn: a row of group buttons
    above the group's tabs."""
    view = wanted_view()
    set_view(view if view in GROUP_OF else VIEWS[0])
    view = st.session_state["view"]
    st.session_state["view_group"] = GROUP_OF[view]  # follows the view, whoever changed it
    st.segmented_control(
        "Views", list(VIEW_GROUPS), key="view_group", on_change=to_group, label_visibility="collapsed",
        help="Learn: the steps of multi-head attention; Look: the patterns; Explain: what heads do and why; "
        "What if: change the heads and see what follows.",
    )  # fmt: skip
    return view, VIEW_GROUPS[GROUP_OF[view]]

"""Choice widgets kept valid (a stored or linked value that is not an option is reported and replaced), how
they write their options into the link, and what a click on a chart chose."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import streamlit as st
from streamlit.errors import StreamlitAPIException

from mha_viz.ui.sidebar import note_ignored, summarize, url_value

# How choice widgets show their options (and so write them into the URL), where not str(option).
URL_LABELS: dict[str, Callable[[object], str]] = {
    "head": lambda i: f"head {i}",
    "step_head": lambda j: f"head {j}",
    "lesson_head": lambda j: f"head {j}",
    "circ_head": lambda j: f"head {j}",
    "pad_head": lambda j: f"head {j}",
    "scale_head": lambda j: f"head {j}",
    "ablate": lambda j: f"head {j}",
}


def valid_choice(key: str, options: list, default, label: Callable[[object], str] | None = None) -> None:
    """Reset a keyed widget's stored value when it is not among the current options. A value the URL will
    give the widget is checked against the options' labels (``label``, or how URL_LABELS shows them): one that
    is not among them is reported at the top of the page (and the widget shows ``default``)."""
    if key in st.session_state:
        if st.session_state[key] not in options:
            st.session_state[key] = default
        return
    value = url_value(key)
    if value is None:
        st.session_state[key] = default
        return
    label = label or URL_LABELS.get(key, str)
    labels = [label(o) for o in options]
    if value not in labels:
        what = "this text's tokens are" if all(isinstance(o, str) for o in options) else "the choices are"
        note_ignored(key, value, f"{what} {summarize(labels)}; showing {label(default)}")
        st.session_state[key] = default


def valid_choices(key: str, options: list, default: list) -> None:  # default: the multiselect's own
    """valid_choice for a multiselect: stored values that are no longer options are dropped; the link's values
    (the parameter repeated, one per choice) that are not options are reported (Streamlit drops them itself, and
    shows ``default`` when none is left)."""
    if key in st.session_state:
        kept = [o for o in st.session_state[key] if o in options]
        if kept != st.session_state[key]:  # (only then: the widget's own default stays its default)
            st.session_state[key] = kept
        return
    if url_value(key) is None:
        return
    label = URL_LABELS.get(key, str)
    labels = [label(o) for o in options]
    given = [v for v in st.query_params.get_all(key) if v != ""]  # "ablate=" alone: none chosen
    bad = [v for v in given if v not in labels]
    if bad:
        good = [v for v in given if v in labels] or [label(o) for o in default]
        why = f"the choices are {summarize(labels)}; showing {', '.join(good) or 'none'}"
        note_ignored(key, ", ".join(bad), why, drop=False)  # Streamlit drops them from the link


def clicked_points(chart_key: str) -> list[tuple[dict, list]]:
    """The points of a chart's selection event, each with its customdata as a plain list.

    Typed-array customdata arrives from the browser as {"0": a, "1": b}; lists stay lists.
    """
    sel = st.session_state.get(chart_key)
    points = getattr(getattr(sel, "selection", None), "points", None) or []
    out = []
    for p in points:
        custom = p.get("customdata")
        if isinstance(custom, dict):
            custom = [custom[k] for k in sorted(custom, key=lambda k: int(k))]
        out.append((p, list(custom) if isinstance(custom, list | tuple) else []))
    return out


def map_click(chart_key: str, show: Callable[[int, int], None]) -> Callable[[], None]:
    """A click callback for a layer × head map (customdata (layer, head, value)): ``show(layer, head)``."""

    def on_click() -> None:
        for _, custom in clicked_points(chart_key):
            if len(custom) >= 2:
                show(int(custom[0]), int(custom[1]))
                return

    return on_click


def forget(keys: tuple[str, ...]) -> None:
    """Let choice widgets fall back to their defaults (from a callback): each value becomes None, which no
    option is, so the view's valid_choice puts its default back before the widget is drawn, and Streamlit
    follows in the URL. A parameter bound to a drawn widget cannot be deleted directly (Streamlit raises)."""
    for key in keys:
        st.session_state[key] = None
        if key in st.query_params:
            with contextlib.suppress(StreamlitAPIException):  # bound: the widget's new value updates it
                del st.query_params[key]

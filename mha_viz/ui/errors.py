"""Failures as messages for people: what went wrong and what to do, never a traceback or Streamlit's raw box.

Used around every page part and around every fragment's own reruns (ui/timing.timed_fragment): Streamlit shows
an exception raised inside a fragment in its own error box, so a fragment needs the guard as much as the page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import streamlit as st

from mha_viz.trace import MhaVizError
from mha_viz.ui.links import plain

log = logging.getLogger("mha_viz")


def guarded(fn: Callable[[], object]) -> object | None:
    """Run ``fn``; show a person-readable st.error instead of a traceback if it fails."""
    try:
        return fn()
    except MhaVizError as exc:
        st.error(plain(exc))
    except Exception as exc:
        log.exception("unexpected error")
        st.error(plain(f"Something went wrong ({type(exc).__name__}: {exc}). Try other settings or a shorter text."))
    return None

"""A long computation in a view (Head importance's scan and pruning curve, exact patching, a corpus run): its
controls in one slot above where its results go, and times from this server's measured pace (issue 35 §2.7: Start and
Cancel stayed above finished results; the Corpus view said "about 22 s" on a loaded machine and took 199 s).

    result = long_run(key, "Scan all 72 heads", auto, waiting, lambda progress: scan(progress), estimate_s)

Before it starts: the Start button (unless ``auto``) and what ``waiting`` says (pace.eta: the quiet-machine estimate
scaled by what this server's last runs took, or said to be a quiet machine's). While it runs: a progress bar that
tells the time left at the pace measured so far in this run, and Cancel. Once done, the slot is emptied, so the
results are the first thing below the view's inputs and no control sits above them as if still pending; the run's
time is told to mha_viz.pipeline.pace.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from mha_viz.pipeline import budget
from mha_viz.pipeline.pace import PACE

T = TypeVar("T")
Progress = Callable[[float, str], None]
ETA_AFTER = 0.05  # the time left is told once this share of the run is done (before: too few steps to time)


def run_key(prefix: str, args: tuple) -> str:
    """A session key for one run's "started" flag (model, texts, target, part)."""
    config, texts, target, part = args
    digest = hashlib.blake2b(repr((config.model_name, texts, target, part)).encode(), digest_size=8).hexdigest()
    return f"{prefix}_{digest}"


def progress_bar(label: str = "Starting…") -> tuple[object, Progress]:
    """A progress bar and its callback ``(fraction, what)``: the text adds the time left at this run's pace."""
    bar = st.progress(0.0, text=label)
    start = time.monotonic()

    def told(fraction: float, what: str) -> None:
        f = min(max(fraction, 0.0), 1.0)
        left = (time.monotonic() - start) * (1 - f) / f if f >= ETA_AFTER else None
        bar.progress(f, text=what + ("" if left is None or f >= 1 else f" · about {left:,.0f} s left at this pace"))

    return bar, told


def start_button(key: str, label: str, primary: bool = False) -> bool:
    """A run that starts on a click and keeps going across reruns until it is done or cancelled."""
    if st.session_state.get(key):
        return True
    if st.button(label, key=f"{key}_start", type="primary" if primary else "secondary"):
        st.session_state[key] = True
        return True
    return False


def cancel_button(key: str) -> None:
    """Any click reruns the script, which stops the run; this one also forgets that it was started."""
    if st.session_state.get(key):
        st.button("Cancel", key=f"{key}_cancel", on_click=lambda: st.session_state.pop(key, None),
                  help="Stops the computation; nothing is kept.")  # fmt: skip


def long_run(
    key: str,
    label: str,
    auto: bool,
    waiting: Callable[[], None],
    run: Callable[[Progress], T],
    estimate_s: float,
    primary: bool = False,
    before: Callable[[], None] | None = None,
) -> T | None:
    """Run ``run(progress)`` with its controls in one slot, emptied once it is done (see the module's docstring).
    ``before`` draws what goes with the controls until then (a first estimate). None: not started (the Start button
    is drawn, and ``waiting()`` said what it would do)."""
    slot = st.empty()
    with slot.container():
        if before is not None:
            before()
        if not auto and not start_button(key, label, primary):
            waiting()
            return None
        _, progress = progress_bar()
        cancel_button(key)
        start = time.monotonic()
        result = run(progress)
        PACE.observe(estimate_s - budget.SECONDS_BASE, time.monotonic() - start)
    slot.empty()
    st.session_state.pop(key, None)
    return result

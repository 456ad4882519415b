"""How fast this server runs now, measured on its own recent work (issue 35 §2.7: on a loaded machine the Corpus
view said "about 22 s" and took 199 s).

budget's time model counts a request's work at rates measured on a quiet 2-core machine. Work that runs here
reports its estimate and the wall time it took (PACE.observe: the recorded pass, a corpus run, a head scan);
a time shown to a person (eta) is the quiet-machine estimate scaled by what the last such runs took, or says
plainly that it is a quiet-machine estimate when nothing has been timed yet. The limits (budget.check_time)
keep the quiet-machine model: a request is refused on its work and cut by its deadline, whatever the load.
"""

from __future__ import annotations

import threading
import time
from collections import deque

PACE_WINDOW_S = 600.0  # runs older than this say nothing about the load now
PACE_RUNS = 5  # the last this many timed runs count
PACE_FLOOR_S = 0.5  # a run estimated under this much work is mostly fixed costs: not timed


class Pace:
    """The ratio of measured to estimated seconds over the last few timed runs (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: deque[tuple[float, float, float]] = deque(maxlen=PACE_RUNS)  # (when, estimated, took)

    def observe(self, estimated_s: float, took_s: float) -> None:
        """A run estimated at ``estimated_s`` of work (quiet machine) took ``took_s`` here."""
        if estimated_s >= PACE_FLOOR_S and took_s > 0:
            with self._lock:
                self._runs.append((time.monotonic(), estimated_s, took_s))

    def factor(self) -> float | None:
        """Measured / estimated seconds over the recent runs (None: none timed in the last PACE_WINDOW_S)."""
        now = time.monotonic()
        with self._lock:
            recent = [(e, t) for when, e, t in self._runs if now - when <= PACE_WINDOW_S]
        if not recent:
            return None
        return sum(t for _, t in recent) / sum(e for e, _ in recent)

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()


PACE = Pace()  # the process's one measure


def _s(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.1f} min"


def eta(quiet_s: float) -> str:
    """A time for people, "about …": scaled to this server's pace now when its recent runs were timed, else
    said to be a quiet machine's."""
    factor = PACE.factor()
    if factor is None:
        return f"about {_s(quiet_s)} on a quiet machine (longer while this server is busy)"
    if 0.8 <= factor <= 1.25:
        return f"about {_s(quiet_s)} (this server's pace now)"
    return (f"about {_s(quiet_s * factor)} at this server's pace now (its last runs took {factor:,.1f} × the "
            f"{_s(quiet_s)} a quiet machine needs)")  # fmt: skip

"""Admit requests against one memory budget for the whole process (issue 21 §2.2: three long Next token links
at once took a server from 1.7 to 7.2 GB, each under its own per-request limit).

A request's estimate (mha_viz.pipeline.budget) counts from when it is admitted until it ends. A request that would take
the total over the budget waits a short while for running ones to end, then is refused with a notice; a
request alone is always admitted (its own limit is MHA_VIZ_MAX_REQUEST_MB). Thread-safe: Streamlit runs each
session's script in its own thread. A request's parts admitted one inside the other in the same thread (the
recorded pass a view asks for, a view's own texts) count together and never wait for each other.

    MHA_VIZ_PROCESS_MB   memory all running requests together may use (default: twice MHA_VIZ_MAX_REQUEST_MB,
                         so 4096 MB, hosted 1536 MB); on top of the loaded models and the caches
    MHA_VIZ_ADMIT_WAIT_S how long a request waits for room before it is refused (default 5 s; 0: no wait)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mha_viz.pipeline import budget
from mha_viz.trace import MhaVizError

POLL_S = 0.25  # a waiting request looks at ``poll`` (its session gone?) this often


class ServerBusy(MhaVizError):
    """The process has no room for this request now; the message says to try again in a moment."""


def process_mb() -> int:
    return budget.env_int("MHA_VIZ_PROCESS_MB", 2 * budget.max_request_mb())


def admit_wait_s() -> float:
    raw = os.environ.get("MHA_VIZ_ADMIT_WAIT_S", "").strip()
    return float(int(raw)) if raw.isascii() and raw.isdigit() else 5.0


class Admission:
    """The running requests' estimates, against a total (bytes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running: dict[int, tuple[int, int]] = {}  # ticket -> (estimated bytes, thread id)
        self._tickets = 0

    @property
    def in_use(self) -> int:
        with self._cond:
            return self._used()

    def _used(self) -> int:
        return sum(need for need, _ in self._running.values())

    def _others(self) -> bool:
        """Whether requests of other threads are running (this thread's own parts never wait for each other)."""
        me = threading.get_ident()
        return any(thread != me for _, thread in self._running.values())

    @property
    def running(self) -> int:
        with self._cond:
            return len(self._running)

    @contextmanager
    def admit(
        self,
        need: int,
        what: str,
        total: int | None = None,
        wait_s: float | None = None,
        poll: Callable[[], None] | None = None,
    ) -> Iterator[None]:
        """Hold ``need`` bytes of the process budget while the block runs; wait at most ``wait_s`` for room,
        then raise ServerBusy. ``poll`` is called while waiting (it may raise to give up: a session gone)."""
        total = process_mb() * 2**20 if total is None else total
        end = time.monotonic() + (admit_wait_s() if wait_s is None else wait_s)
        with self._cond:
            while self._others() and self._used() + need > total:
                left = end - time.monotonic()
                if left <= 0:
                    used = self._used()
                    raise ServerBusy(
                        f"The server is busy, try again in a moment: {what} needs about {need / 2**20:,.0f} MB and "
                        f"{len(self._running)} running request(s) hold {used / 2**20:,.0f} of the "
                        f"{total / 2**20:,.0f} MB this server gives all requests together (MHA_VIZ_PROCESS_MB)."
                    )
                self._cond.wait(min(left, POLL_S))
                if poll is not None:
                    self._cond.release()  # poll outside the lock (it may raise or take a while)
                    try:
                        poll()
                    finally:
                        self._cond.acquire()
            self._tickets += 1
            ticket = self._tickets
            self._running[ticket] = (need, threading.get_ident())
        try:
            yield
        finally:
            with self._cond:
                del self._running[ticket]
                self._cond.notify_all()


ADMISSION = Admission()  # the process's one budget

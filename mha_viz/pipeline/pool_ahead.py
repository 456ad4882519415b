"""A long recording's pooled exact maps computed ahead (issue 38 §3): after the whole pass is recorded, a background
thread at the lowest CPU priority computes every tiled call's maps at the tile sides the views will ask for (the
Overview's and the Heads grid's), one layer at a time, all sides in one pass over its scores (Call.pooled_maps), and
keeps them on the call (Call.pooled), where Call.pooled_map finds them: a view opened later reads them. A view opened
before its layer is done computes that layer itself, as without this. Nothing here touches the model; the job holds
its recording weakly (a recording dropped from its cache stops it) and stops between layers when cancelled."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

from mha_viz.config import POOL_AHEAD_NICE
from mha_viz.pipeline.road import Recording

_LOG = logging.getLogger(__name__)  # one line when a job ends (benchmarks/bench_long_views.py reads it)
Sides = Callable[[int, int], tuple[int, ...]]  # (n_q, n_k) -> the tile sides f to compute


def _lowest_priority() -> None:
    """This thread (and the torch worker threads it starts, which inherit it) at nice POOL_AHEAD_NICE (19): the
    page's own work goes first. (Setting OpenMP's thread count for this thread alone through ctypes was tried and
    taken out: a worker crashed once near it, and a crash must never reach the server.)"""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or not allowed: at the page's priority
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), POOL_AHEAD_NICE)


class PoolAhead:
    """One recording's maps computed ahead in a daemon thread: start(), cancel(), join(); ``done`` is set when every
    tiled call has its maps, ``layers_done`` counts the calls finished (computed now or found kept)."""

    def __init__(self, rec: Recording, sides: Sides) -> None:
        self._rec = weakref.ref(rec)
        self.keys = [key for key, call in rec.run.calls.items() if call.row_lse is not None]  # the tiled calls
        self._sides = sides
        self._stop = threading.Event()
        self.done = threading.Event()
        self.layers_done = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mha-viz-pool-ahead", daemon=True)

    def recording(self) -> Recording | None:
        """The recording whose maps this job computes (None once its cache dropped it)."""
        return self._rec()

    def start(self) -> PoolAhead:
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stops the job before its next layer (the layer under way finishes: a second or so at 8,192 tokens)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        _lowest_priority()
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            for key in self.keys:
                rec = self._rec()
                if self._stop.is_set() or rec is None:
                    return
                call = rec.run.calls[key]
                del rec  # not held while the layer is computed: only its call
                sides = self._sides(int(call.q.shape[-2]), int(call.k.shape[-2]))
                missing = tuple(f for f in dict.fromkeys(sides) if f not in call.pooled)
                if missing:
                    call.pooled_maps(missing)  # kept on the call
                self.layers_done += 1
            self.done.set()
            _LOG.info("pooled maps ahead: %d calls ready in %.1f s (%.1f CPU s)", len(self.keys),
                      time.perf_counter() - start, time.thread_time() - cpu)  # fmt: skip
        except Exception as e:
            self.error = e

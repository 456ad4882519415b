"""A long recording's pooled exact maps computed ahead (issue 38 §3): after the whole pass is recorded, a background
thread computes every tiled call's maps at the tile sides the views will ask for (the
Overview's and the Heads grid's), one layer at a time, all sides in one pass over its scores (Call.pooled_maps), and
keeps them on the call (Call.pooled), where Call.pooled_map finds them: a view opened later reads them. A view opened
before its layer is done computes that layer itself, as without this. The job waits while a page run of the
process is under way (page_running: the page goes first; checked between layers). Nothing here touches the
model; the job holds its recording weakly (a recording dropped from its cache stops it) and stops between layers
when cancelled."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator

from mha_viz.pipeline.road import Recording

_LOG = logging.getLogger(__name__)  # one line when a job ends (benchmarks/bench_long_views.py reads it)
Sides = Callable[[int, int], tuple[int, ...]]  # (n_q, n_k) -> the tile sides f to compute


_PAGES_IDLE = threading.Event()  # set while no page run of this process is under way (page_running)
_PAGES_IDLE.set()
_PAGES = [0]
_PAGES_LOCK = threading.Lock()


@contextlib.contextmanager
def page_running() -> Iterator[None]:
    """A page run of this process: every job waits for it to end before its next layer. The jobs run at the page's
    CPU priority. A job at nice 19 was tried: a low-priority thread that holds the GIL when the system takes its
    core away stalls every thread of the server (at 8,192 tokens a page run took 8 s, and a client's websocket
    missed its 20 s keepalive)."""
    with _PAGES_LOCK:
        _PAGES[0] += 1
        _PAGES_IDLE.clear()
    try:
        yield
    finally:
        with _PAGES_LOCK:
            _PAGES[0] -= 1
            if _PAGES[0] == 0:
                _PAGES_IDLE.set()


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
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            for key in self.keys:
                while not _PAGES_IDLE.wait(0.1):  # a page run first (checked between layers)
                    if self._stop.is_set():
                        return
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

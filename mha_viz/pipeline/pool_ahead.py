"""A long recording's pooled exact maps computed ahead (issue 38 §3): after the whole pass is recorded, a background
thread computes every tiled call's maps at the tile sides the views will ask for (the
Overview's and the Heads grid's), one layer at a time, all sides in one pass over its scores (tile_pool.pooled_maps, as
Call.pooled_maps), and keeps them on the call (Call.pooled), where Call.pooled_map finds them: a view opened later
reads them. The layers go from the one shown when the recording ended outwards (its neighbours are the next a reader
opens). A view opened before its layer is done computes that layer itself, as without this. The job waits while a
page run of the process is under way (page_running: the page goes first and has the cores to itself; checked before
each block of rows, a tenth of a second at 8,192 tokens, not only between layers), and drops a layer that a page
computed meanwhile. Nothing here touches the model; the job holds its recording weakly (a recording dropped from its
cache stops it) and stops before its next block of rows when cancelled."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import torch

from mha_viz.models.call import Call
from mha_viz.pipeline.road import Recording
from mha_viz.tile_pool import pooled_maps
from mha_viz.tiles import allowed_of

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


def pages_running() -> int:
    """How many page runs of this process are under way now (page_running blocks)."""
    return _PAGES[0]


class _Stop(Exception):
    """The layer under way is given up: the job was cancelled, or a page computed the layer's maps meanwhile."""


def outwards(keys: list, first: int | None) -> list:
    """The calls' keys (part, layer) in the order the job computes them: from layer ``first`` outwards (first, first
    − 1, first + 1, …: the neighbours a reader opens next), each part in its order; None: as given."""
    if first is None:
        return list(keys)
    return sorted(keys, key=lambda key: (abs(key[1] - first), key[1] > first))


class PoolAhead:
    """One recording's maps computed ahead in a daemon thread: start(), cancel(), join(); ``done`` is set when every
    tiled call has its maps, ``layers_done`` counts the calls finished (computed now, found kept, or computed by a
    page meanwhile); ``first``: the layer to start from (outwards)."""

    def __init__(self, rec: Recording, sides: Sides, first: int | None = None) -> None:
        self._rec = weakref.ref(rec)
        self.keys = outwards([key for key, call in rec.run.calls.items() if call.row_lse is not None], first)
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
        """Stops the job before its next block of rows (the layer under way is given up)."""
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
                if not self._wait():
                    return
                rec = self._rec()
                if rec is None:
                    return
                call = rec.run.calls[key]
                del rec  # not held while the layer is computed: only its call
                sides = self._sides(int(call.q.shape[-2]), int(call.k.shape[-2]))
                missing = tuple(f for f in dict.fromkeys(sides) if f not in call.pooled)
                try:
                    if missing:
                        self._layer(call, missing)
                except _Stop:
                    if self._stop.is_set():
                        return
                self.layers_done += 1
            self.done.set()
            _LOG.info("pooled maps ahead: %d calls ready in %.1f s (%.1f CPU s)", len(self.keys),
                      time.perf_counter() - start, time.thread_time() - cpu)  # fmt: skip
        except Exception as e:
            self.error = e

    def _wait(self) -> bool:
        """Waits while a page run of the process is under way; False once the job is cancelled."""
        while not _PAGES_IDLE.wait(0.1):
            if self._stop.is_set():
                return False
        return not self._stop.is_set()

    def _layer(self, call: Call, fs: tuple[int, ...]) -> None:
        """Every head's maps at the sides ``fs`` in one pass (as Call.pooled_maps), kept on the call; before each
        block of rows the job waits for the page runs, and gives the layer up (_Stop) when cancelled or when a page
        computed these maps meanwhile."""

        def between() -> None:
            paused = not _PAGES_IDLE.is_set()
            if not self._wait():
                raise _Stop
            if paused and all(f in call.pooled for f in fs):  # a page computed them while the job waited
                raise _Stop

        allowed = None if call.allowed is None else allowed_of(call.allowed)
        with torch.no_grad():
            maps = pooled_maps(call.q[:1], call.k[:1], call.row_lse[:1], fs, call.scaling, call.softcap,
                               None if call.bias is None else call.bias[:1], None if allowed is None else allowed[:1],
                               call.sink is not None, between=between)  # fmt: skip
        for f, m in zip(fs, maps, strict=True):
            call.keep_pooled(f, m.numpy())

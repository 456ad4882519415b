"""How many CPU threads torch uses per request, set before torch is imported.

On a server shared by many sessions (the hosted demo, benchmarks/load_test.py with 10 users on 2 cores), torch
giving every request all cores makes the requests' threads fight over them (one 70 s run of that benchmark: server
time p50 1.69 s with the default, 0.45 s with one thread each; a longer run with one thread read 2.1 s, the ten
test browsers sharing the same cores, so the gain is not established).
One user alone on their own machine wants all cores (its long texts are matrix products). So: MHA_VIZ_TORCH_THREADS
(a positive number) if set, else 1 in hosted mode, else torch's own default (all cores). torch reads it once,
when it is first imported (OMP_NUM_THREADS, MKL_NUM_THREADS); an explicit OMP_NUM_THREADS is left alone.
Setting torch's count per request at run time was tried and was worse (p50 3.4 s: resizing the pools per run).

A busy machine (issue 22 §4). torch's default of every core is the fastest on a quiet machine, and the slowest by
far when other processes keep cores busy: its threads wait for each other's time slices (Head importance on MiniLM,
2 cores, two busy processes beside it: 3.4–41 s with 2 threads, 1.3 s with one). So where nothing fixes the count
(no MHA_VIZ_TORCH_THREADS, no OMP_NUM_THREADS, not hosted), ``adapt()`` runs before each request and the CLI's
command: it measures how many cores other processes kept busy since the last look (/proc/stat's busy time minus this
process's own CPU time, over at least LOOK_WINDOW_S) and gives torch the cores left, at least one; the pools are
resized only when that number changes."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator

from mha_viz.config import hosted

ENV = "MHA_VIZ_TORCH_THREADS"


def torch_threads() -> int | None:
    """The threads per request this deployment asks for (None: torch's default)."""
    raw = os.environ.get(ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return 1 if hosted() else None


def configure_threads() -> int | None:
    """Put the setting where torch reads it, if torch is not imported yet (later it would only reach the
    subprocesses this process starts). Returns the count set, or None."""
    n = torch_threads()
    if n is None or "torch" in sys.modules:
        return None
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
    os.environ.setdefault("MKL_NUM_THREADS", str(n))
    return n


LOOK_WINDOW_S = 0.25  # a shorter window since the last look keeps the last decision (no probe on the request's path)
PROBE_S = 0.2  # the first look (the CLI's) samples this long
_last: tuple[float, float, float] | None = None  # (wall, all CPUs' busy seconds, this process's CPU seconds)


def fixed() -> bool:
    """The count is set by the deployment (MHA_VIZ_TORCH_THREADS, OMP_NUM_THREADS or hosted mode)."""
    return torch_threads() is not None or "OMP_NUM_THREADS" in os.environ


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _sample() -> tuple[float, float, float] | None:
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            ticks = [int(x) for x in fh.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None  # not Linux: nothing to measure
    hz = os.sysconf("SC_CLK_TCK")
    busy = (sum(ticks) - ticks[3] - ticks[4]) / hz
    own = sum(os.times()[:2])  # this process's user + system seconds (all its threads)
    return time.monotonic(), busy, own


def others_busy(probe: bool = False) -> float | None:
    """Cores that other processes kept busy since the last look (None: too soon to tell, or not measurable).
    With ``probe``, a first look samples PROBE_S."""
    global _last
    if not probe and _last is not None and time.monotonic() - _last[0] < LOOK_WINDOW_S:
        return None  # too soon to tell: /proc/stat is not read (about 1 ms a read on a busy machine)
    now = _sample()
    if now is None:
        return None
    if _last is None or (probe and now[0] - _last[0] < LOOK_WINDOW_S):
        _last = now
        if not probe:
            return None
        time.sleep(PROBE_S)
        now = _sample()
        if now is None:
            return None
    wall, busy, own = (a - b for a, b in zip(now, _last, strict=True))
    if wall < (0.9 * PROBE_S if probe else LOOK_WINDOW_S):  # a probe's own window is PROBE_S
        return None
    _last = now
    return max(0.0, (busy - own) / wall)


def adapt(probe: bool = False) -> int | None:
    """Give torch the cores other processes leave free (at least one), unless the count is fixed; returns the
    count set, or None where nothing changed or was measured."""
    if fixed():
        return None
    others = others_busy(probe)
    if others is None:
        return None
    import torch

    n = max(1, min(cores(), cores() - round(others)))
    if n == torch.get_num_threads():
        return None
    torch.set_num_threads(n)
    return n


def adapt_now() -> int | None:
    """adapt() over a fresh PROBE_S window, before a computation of seconds (a long text's pass): what other
    processes do now, not since the last look (a browser that was drawing the last page waits idle for this one;
    SmolLM2 to layer 9 at 2048 tokens, 2 cores: 7.8 s on the one thread the last look left, 4.4 s on two)."""
    global _last
    if fixed():
        return None
    _last = None  # others_busy then samples, waits PROBE_S and samples again
    return adapt(probe=True)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch's work inside the block on one thread (the calling thread's count put back after): many small operations
    (a long call's check rows, the mask's causality check) cost more in thread hand-overs than they gain, and on a
    busy machine each hand-over waits for a descheduled thread's next time slice (SmolLM2's first view at 2,048
    tokens, two busy processes beside it: its check rows took 17 s of a 75 s view on 2 threads, 3 s on one; see
    docs/long-recording.md). Nested blocks and a count of one already cost nothing."""
    import torch

    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)

"""The server's own time per rerun, for the benchmarks (and anyone profiling a deployment).

With MHA_VIZ_TIMINGS=<file> set, every script run (a whole page, or a fragment such as the opened head) appends
one JSON line: {"at": unix time, "kind": "page" | "fragment" | "preload" (the model loaded at server start),
"s": seconds, "plot_s": seconds spent handing figures to Streamlit (figure checks and JSON), "figures": count,
"session": a short session id}. Unset, nothing
is measured or written.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import wraps
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])
_WRITE = threading.Lock()


@dataclass
class _Run:
    plot_s: float = 0.0
    figures: int = 0


_RUN: ContextVar[_Run | None] = ContextVar("mha_viz_run_timing", default=None)


def _path() -> str | None:
    return os.environ.get("MHA_VIZ_TIMINGS") or None


@contextmanager
def timed_run(kind: str) -> Iterator[None]:
    """Time the block as one script run of ``kind`` ("page" or "fragment") and append it to the timings file."""
    path = _path()
    if path is None or _RUN.get() is not None:  # not asked for, or already inside a timed run
        yield
        return
    run, t0 = _Run(), time.perf_counter()
    token = _RUN.set(run)
    try:
        yield
    finally:
        _RUN.reset(token)
        _write(path, kind, time.perf_counter() - t0, run)


@contextmanager
def timed_plot() -> Iterator[None]:
    """Count the block as time spent handing a figure to Streamlit (inside a timed run; else free)."""
    run = _RUN.get()
    if run is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        run.plot_s += time.perf_counter() - t0
        run.figures += 1


def timed_fragment(fn: F) -> F:
    """Time a fragment's own reruns (its first run is part of the page's), and show its failures as messages
    (ui/errors.guarded: Streamlit would show an exception inside a fragment in its raw error box)."""
    from mha_viz.ui.errors import guarded

    @wraps(fn)
    def run(*args: object, **kwargs: object) -> object:
        with timed_run("fragment"):
            return guarded(lambda: fn(*args, **kwargs))

    return run  # type: ignore[return-value]


def _session() -> str:
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
        return ctx.session_id[:8] if ctx else "-"
    except Exception:  # no Streamlit context (tests, scripts)
        return "-"


def _write(path: str, kind: str, seconds: float, run: _Run) -> None:
    line = json.dumps({
        "at": round(time.time(), 3), "kind": kind, "s": round(seconds, 4), "plot_s": round(run.plot_s, 4),
        "figures": run.figures, "session": _session(),
    })  # fmt: skip
    with _WRITE, open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")

"""Python's cyclic garbage collector, paused while a large, long-lived heap is built (imports, a model load).

Importing torch and transformers' modeling code and loading a model allocate millions of objects that live as
long as the process; the collector meanwhile runs ~6 full collections over the growing heap, ~1 s of CPU on a
cold server (measured: the bundled model's first load, CPU time 3.5-4.7 s with it, 2.7-3.3 s without).
Nothing computed changes: the collector only frees unreachable cycles, and it resumes afterwards.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_LOCK = threading.Lock()
_depth = 0  # blocks inside gc_paused() now, in any thread
_resume = False  # the collector was on when the first of them began


@contextmanager
def gc_paused() -> Iterator[None]:
    """Turn automatic collection off for the block; back on when the last such block (any thread) ends, if it
    was on when the first began. Nested and concurrent blocks are safe: the collector is never left off."""
    global _depth, _resume
    with _LOCK:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _LOCK:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()

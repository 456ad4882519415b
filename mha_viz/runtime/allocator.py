"""How memory for big tensors is got and given back: set up once per process.

A request's big tensors (a 2048-token pass builds 9 × 2048 × 2048 float32 scores, 151 MB, several times a layer)
are fresh mappings, so each of their 4 KB pages is faulted in and zeroed by the kernel on first touch: measured on
SmolLM2 at 2048 tokens, the pass up to layer 9 took 4.7-5.3 s, 4.5 s of it system time in 1.86 million page
faults. torch maps blocks of 2 MB and more as transparent huge pages when THP_MEM_ALLOC_ENABLE is set before its
first allocation (c10's alloc_cpu: the block is 2 MB aligned and madvise(MADV_HUGEPAGE)): 512 times fewer faults,
the same pass 2.9-3.3 s, the same peak memory. It takes effect where the kernel's THP mode is "madvise" or
"always" and changes no value computed (only where the memory comes from). An explicit setting is left alone.
"""

from __future__ import annotations

import contextlib
import os
import sys

HUGE_PAGES_ENV = "THP_MEM_ALLOC_ENABLE"
MMAP_THRESHOLD = 4 * 2**20  # bytes: larger blocks (tensors, arrays) are mapped and unmapped on their own


def huge_pages() -> bool:
    """Ask torch for huge pages on big blocks, if torch is not imported yet (it reads the setting once).
    Returns whether the setting is on for this process's torch."""
    if "torch" not in sys.modules:
        os.environ.setdefault(HUGE_PAGES_ENV, "1")
    return os.environ.get(HUGE_PAGES_ENV) == "1"


def tune_allocator() -> None:
    """glibc's malloc for a server of big short-lived arrays: blocks of MMAP_THRESHOLD bytes and more are
    mapped on their own, so they go back to the operating system when freed (glibc otherwise raises its
    threshold after each such free and serves later big blocks from a heap that fragments: measured at 512
    tokens, peak 944 -> 879 MB). One arena per CPU at most. A no-op where there is no glibc."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD (also turns off the dynamic threshold)
        libc.mallopt(-8, max(2, os.cpu_count() or 2))  # M_ARENA_MAX


def release_memory() -> None:
    """After a run: hand freed memory back to the operating system (glibc keeps freed heap otherwise), so
    the server returns close to its idle footprint after a big request (under a millisecond). A no-op where
    there is no glibc."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)

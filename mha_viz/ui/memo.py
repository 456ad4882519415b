"""A process-wide cache that holds its caps: entries and bytes, counted from the arrays a value holds.

st.cache_data stores a value larger than its max_size anyway ("stored anyway"); here such a value is
computed, returned and dropped. Values are shared between sessions as they are (not copied): they are
frozen traces and arrays that the views only read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch

F = TypeVar("F", bound=Callable[..., Any])
CACHES: list[SizedCache] = []


def nbytes(value: object, _seen: set[int] | None = None) -> int:
    """Bytes held by the tensors, arrays and byte strings inside ``value`` (each counted once)."""
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return value.element_size() * value.nelement()
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, bytes | bytearray | str):
        return len(value)
    if isinstance(value, dict):
        return sum(nbytes(k, seen) + nbytes(v, seen) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return sum(nbytes(v, seen) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes(v, seen) for v in vars(value).values())
    return 0


class SizedCache:
    """Least-recently-used entries, at most ``max_entries`` of them and ``max_bytes`` in all."""

    def __init__(self, name: str, max_entries: int, max_bytes: int) -> None:
        self.name, self.max_entries, self.max_bytes = name, max_entries, max_bytes
        self._items: OrderedDict[object, tuple[object, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.total = 0
        self.skipped = 0  # values computed but too large to keep

    def get_or_compute(self, key: object, compute: Callable[[], object]) -> object:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        value = compute()
        size = nbytes(value)
        with self._lock:
            if size > self.max_bytes:
                self.skipped += 1
                return value
            if key not in self._items:
                self._items[key] = (value, size)
                self.total += size
            while self._items and (self.total > self.max_bytes or len(self._items) > self.max_entries):
                _, (_, dropped) = self._items.popitem(last=False)
                self.total -= dropped
        return value

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.total = 0


def key_of(value: object) -> object:
    """A hashable key for an argument: arrays and tensors by their shape, dtype and a digest of their bytes."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ("ndarray", data.shape, str(data.dtype), hashlib.blake2b(data.tobytes(), digest_size=16).digest())
    if isinstance(value, list | tuple):
        return tuple(key_of(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, key_of(v)) for k, v in value.items()))
    return value


def sized_cache(max_entries: int, max_mb: float) -> Callable[[F], F]:
    """Cache a function of plain, hashable arguments in a SizedCache."""

    def wrap(fn: F) -> F:
        cache = SizedCache(fn.__name__, max_entries, int(max_mb * 2**20))
        CACHES.append(cache)

        @functools.wraps(fn)
        def cached(*args: object, **kwargs: object) -> object:
            key = (key_of(args), key_of(kwargs))
            return cache.get_or_compute(key, lambda: fn(*args, **kwargs))

        cached.cache = cache  # type: ignore[attr-defined]
        return cached  # type: ignore[return-value]

    return wrap


def clear_all() -> None:
    for cache in CACHES:
        cache.clear()


MMAP_THRESHOLD = 4 * 2**20  # bytes: larger blocks (tensors, arrays) are mapped and unmapped on their own


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


def freeze_heap() -> None:
    """Move every object alive now (imported modules, loaded models) out of the garbage collector's sight:
    its full collections then walk only what requests made since (~0.5 s -> milliseconds)."""
    gc.freeze()


def collect_garbage() -> None:
    """Before a run: collect the cycles earlier runs left (figures, traces: ~80 MB measured after a 512-token
    Overview; they die with the script's frames, after its last line, and Streamlit's post-script collection
    is off). With the heap frozen (freeze_heap) this costs milliseconds; unfrozen it is left to Python."""
    if gc.get_freeze_count():
        gc.collect()


def release_memory() -> None:
    """After a run: hand freed memory back to the operating system (glibc keeps freed heap otherwise), so
    the server returns close to its idle footprint after a big request (under a millisecond). A no-op where
    there is no glibc."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)

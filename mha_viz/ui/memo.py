"""A process-wide cache that holds its caps: entries and bytes, counted from the arrays a value holds.

st.cache_data stores a value larger than its max_size anyway ("stored anyway"); here such a value is
computed, returned and dropped. Values are shared between sessions as they are (not copied): they are
frozen traces and arrays that the views only read.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import itertools
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np
import torch
from streamlit.runtime.scriptrunner import get_script_run_ctx

from mha_viz.config import GC_GROWTH_MB, hosted
from mha_viz.ui.guard import stop_if_gone

F = TypeVar("F", bound=Callable[..., Any])
CACHES: list[SizedCache] = []


_NO_BYTES = frozenset({int, float, bool, complex, type(None)})


def nbytes(value: object, _seen: set[int] | None = None) -> int:
    """Bytes held by the tensors, arrays and byte strings inside ``value`` (each counted once). The common kinds
    first, numbers at once: a cached figure is hundreds of them (issue 36 §6: ~6% of ten sessions' page runs)."""
    kind = type(value)
    if kind in _NO_BYTES:
        return 0
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if kind is dict or isinstance(value, dict):
        return _many(value.keys(), seen) + _many(value.values(), seen)
    if kind is list or kind is tuple or isinstance(value, list | tuple | set | frozenset):
        return _many(value, seen)
    if kind is str or isinstance(value, bytes | bytearray | str):
        return len(value)
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, torch.Tensor):
        return value.element_size() * value.nelement()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes(v, seen) for v in vars(value).values())
    return 0


def _many(values: Iterable[object], seen: set[int]) -> int:
    """nbytes of each of ``values``, the same sum, with numbers and strings counted here rather than in a call each:
    a new session's figures and recording hold thousands of labels and numbers (issue 36 §6)."""
    total = 0
    for v in values:
        kind = type(v)
        if kind in _NO_BYTES:
            continue
        if kind is str:
            if id(v) not in seen:
                seen.add(id(v))
                total += len(v)
            continue
        total += nbytes(v, seen)
    return total


def cache_limit_bytes() -> int:
    """All SizedCaches together hold at most this many bytes (MHA_VIZ_CACHE_MB; default 320 hosted, 2,048 locally,
    so that a long text's recording that one request may make (MHA_VIZ_MAX_REQUEST_MB: SmolLM2's 8,192 tokens, about
    1 GB) is kept, not recorded again on every page run): each cache's own caps decide what one kind of value may
    take, this one what the process keeps however the kinds mix."""
    default = 320.0 if hosted() else 2048.0
    raw = os.environ.get("MHA_VIZ_CACHE_MB", "").strip()
    try:
        mb = float(raw) if raw else default
    except ValueError:
        mb = default
    return int((mb if mb > 0 else default) * 2**20)


_LOCK = threading.RLock()  # one lock for every cache: eviction across caches stays consistent
_TICK = itertools.count()  # last use, across caches: the least recently used entry anywhere goes first


class SizedCache:
    """Least-recently-used entries, at most ``max_entries`` of them and ``max_bytes`` in all; and all caches
    together at most cache_limit_bytes() (the least recently used entry of any cache is dropped first)."""

    def __init__(self, name: str, max_entries: int, max_bytes: int) -> None:
        self.name, self.max_entries, self.max_bytes = name, max_entries, max_bytes
        self._items: OrderedDict[object, tuple[object, int, int]] = OrderedDict()  # key: (value, size, tick)
        self.total = 0
        self.skipped = 0  # values computed but too large to keep

    def get_or_compute(self, key: object, compute: Callable[[], object]) -> object:
        owner = _run_owner()
        with _LOCK:
            if key in self._items:
                value, size, _ = self._items.pop(key)
                self._items[key] = (value, size, next(_TICK))
                return value
            held = _HELD.get(owner, {}).get(self.name)
            if held is not None and held[0] == key:
                return held[1]
        stop_if_gone()  # the page's client left: no new work for it (ui/guard.py)
        value = compute()
        size = nbytes(value)
        with _LOCK:
            if size > min(self.max_bytes, cache_limit_bytes()):
                self.skipped += 1
                if owner is not None:  # too large to keep: held for the rest of this session's page run
                    _HELD.setdefault(owner, {})[self.name] = (key, value)
                return value
            if key not in self._items:
                self._items[key] = (value, size, next(_TICK))
                self.total += size
            while self._items and (self.total > self.max_bytes or len(self._items) > self.max_entries):
                self._drop_oldest()
            _evict_across(cache_limit_bytes())
        return value

    def _drop_oldest(self) -> None:
        _, (_, dropped, _) = self._items.popitem(last=False)
        self.total -= dropped

    def oldest_tick(self) -> int | None:
        return next(iter(self._items.values()))[2] if self._items else None

    def __contains__(self, key: object) -> bool:
        with _LOCK:
            return key in self._items

    def clear(self) -> None:
        with _LOCK:
            self._items.clear()
            self.total = 0


# A value too large for its cache (a 2048-token layer's trace: ~310 MB; SmolLM2's whole recording at 2048 before
# recordings were slim) is computed, used and dropped; without this, every caller in one script run would compute
# it again. The latest such value of each cache is held per session until its page run ends (drop_held); a
# fragment's rerun computes it again at most once.
_HELD: dict[object, dict[str, tuple[object, object]]] = {}


def _run_owner() -> object:
    """The session whose script is running in this thread (None outside a Streamlit script run)."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return None if ctx is None else ctx.session_id


def drop_held() -> None:
    """Let go of this session's oversize values (at the end of a page run)."""
    with _LOCK:
        _HELD.pop(_run_owner(), None)


def total_bytes() -> int:
    """Bytes held by every SizedCache."""
    with _LOCK:
        return sum(c.total for c in CACHES)


def _evict_across(limit: int) -> None:
    """Drop least recently used entries of any cache until all caches hold at most ``limit`` bytes."""
    while sum(c.total for c in CACHES) > limit:
        ticks = [(t, i) for i, c in enumerate(CACHES) if (t := c.oldest_tick()) is not None]
        if not ticks:
            return
        CACHES[min(ticks)[1]]._drop_oldest()


_PLAIN = frozenset({str, int, float, bool, type(None)})


def key_of(value: object) -> object:
    """A hashable key for an argument: arrays and tensors by their shape, dtype and a digest of their bytes."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ("ndarray", data.shape, str(data.dtype), hashlib.blake2b(data.tobytes(), digest_size=16).digest())
    if isinstance(value, tuple) and all(type(v) in _PLAIN for v in value):
        return value  # token labels and the like (2,048 of them at a long text): hashable as they are
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

        def key(*args: object, **kwargs: object) -> object:
            return key_of(args), key_of(kwargs)

        @functools.wraps(fn)
        def cached(*args: object, **kwargs: object) -> object:
            return cache.get_or_compute(key(*args, **kwargs), lambda: fn(*args, **kwargs))

        cached.cache = cache  # type: ignore[attr-defined]
        cached.holds = lambda *args, **kwargs: key(*args, **kwargs) in cache  # type: ignore[attr-defined]
        return cached  # type: ignore[return-value]

    return wrap


def clear_all() -> None:
    for cache in CACHES:
        cache.clear()


_GC_LOCK = threading.Lock()
_DROPPED: list[weakref.ref] = []  # models let go of while frozen, not freed yet (a run may still hold one)
# Whether freeze_heap ran. Not gc.get_freeze_count(): that walks the whole frozen list (~120 ms with 414,000
# objects frozen, SmolLM2 and MiniLM loaded), and collect_garbage runs before every page.
_frozen = False
_collected_rss = 0  # the process's resident bytes when collect_garbage last collected


def freeze_heap() -> None:
    """Move every object alive now (imported modules, loaded models) out of the garbage collector's sight:
    its full collections then walk only what requests made since (~0.25 s with SmolLM2 loaded -> 0.3 ms).
    Dead cycles are collected first, so none is frozen. A frozen object that later becomes part of unreachable
    cycles is never collected: whoever drops a frozen model calls release_dropped() (issue 21 §2.1: without it,
    each reload of an evicted SmolLM2 kept its 520 MB)."""
    global _frozen
    with _GC_LOCK:
        gc.collect()
        gc.freeze()
        _frozen = True


def release_dropped(refs: list[weakref.ref]) -> None:
    """Free models that were just dropped from a cache (weak references to them): the frozen heap is thawed,
    collected and frozen again (~0.3 s with SmolLM2; models are dropped rarely). A model that a running request
    still holds is tried again before each later run (collect_garbage) until it is gone."""
    with _GC_LOCK:
        _DROPPED.extend(refs)
    _refreeze()


def _refreeze() -> None:
    with _GC_LOCK:
        gc.unfreeze()
        gc.collect()
        if _frozen:
            gc.freeze()
        _DROPPED[:] = [r for r in _DROPPED if r() is not None]


def dropped_alive() -> int:
    """Dropped models not freed yet (held by a running request)."""
    with _GC_LOCK:
        return sum(r() is not None for r in _DROPPED)


def collect_garbage() -> None:
    """Before a run: collect the cycles earlier runs left (figures, traces: ~80 MB measured after a 512-token
    Overview; they die with the script's frames, after its last line, and Streamlit's post-script collection
    is off). With the heap frozen (freeze_heap) it walks only what requests made since, but that is every cached
    figure and table: ~0.1 s of the GIL with the caches full, before each of ten sessions' pages (issue 36 §6).
    So only once the process grew GC_GROWTH_MB since the last collection (cycles holding arrays grow it; a run
    that makes no garbage does not), whichever session's run comes first; every run where memory cannot be read.
    Unfrozen it is left to Python. While a dropped model is still alive, the whole heap is collected instead
    (release_dropped)."""
    global _collected_rss
    if _DROPPED:
        _refreeze()
    elif _frozen:
        with _GC_LOCK:  # one run collects, the runs that start meanwhile skip it (issue 36 §6)
            rss = _rss_bytes()
            if rss is not None:  # growth counts from the lowest point since (a big run's memory handed back)
                _collected_rss = min(_collected_rss, rss)
            if rss is not None and rss - _collected_rss < GC_GROWTH_MB * 2**20:
                return
            _collected_rss = rss if rss is not None else 0
        gc.collect()
        after = _rss_bytes()
        with _GC_LOCK:  # the next collection counts from what is left (freed arrays may go back to the system)
            _collected_rss = min(_collected_rss, after) if after is not None else _collected_rss


def _rss_bytes() -> int | None:
    """The process's resident memory (Linux: /proc/self/statm), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None

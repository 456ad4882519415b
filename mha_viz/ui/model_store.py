"""The loaded models, held by the process in a lock-protected dict rather than in st.cache_resource.

Why not st.cache_resource: any websocket client can send Streamlit's ``clear_cache`` message, which empties every
Streamlit cache for all users (AppSession._handle_clear_cache_request); the next visitor then loads the model
again (issue 21 §2.1). The server also refuses that message (mha_viz/serve/limits.py); this store does not
depend on it.

Why release_dropped: the loader freezes the heap after each load (ui/memo.freeze_heap, so that the collection
before each run walks milliseconds, not the model). A frozen model that is dropped is never collected unless
the heap is thawed and collected: +520 MB per SmolLM2 eviction otherwise.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from mha_viz.ui.memo import freeze_heap, release_dropped

T = TypeVar("T")


class ModelStore(Generic[T]):
    """At most ``max_entries`` models, least recently used dropped first. One load at a time in the process:
    concurrent callers of a key wait for the first one's load (as st.cache_resource did), and two models never
    load at once (transformers' lazy imports raced that way: issue 21 §2.4; and peak memory stays one load's).
    A failed load is not kept."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._models: OrderedDict[Hashable, T] = OrderedDict()
        self._load_lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
        with self._load_lock:
            with self._lock:
                if key in self._models:
                    self._models.move_to_end(key)
                    return self._models[key]
            value = load()
            with self._lock:
                self._models[key] = value
                refs = []
                while len(self._models) > self.max_entries:
                    refs.append(weakref.ref(self._models.popitem(last=False)[1]))
        freeze_heap()  # the model and the libraries, out of the collector's walks
        if refs:
            release_dropped(refs)
        return value

    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._models)

    def drop(self, key: Hashable) -> bool:
        """Let go of one model (and free it once no request holds it). Returns whether it was held."""
        with self._lock:
            value = self._models.pop(key, None)
            if value is None:
                return False
            refs = [weakref.ref(value)]
            del value
        release_dropped(refs)
        return True

"""Work started with the server, before anyone visits: the bundled model loads in a background thread (and with
it torch, transformers and the dashboard's code) while the first browser is still fetching the page's code.

`streamlit run app.py` finds app.py's ``app = st.App(...)`` and serves it (Streamlit's ASGI mode); the App's
lifespan calls start() once, when the server starts. This module is light on purpose (importing it imports
nothing heavy), so the server answers at once; the heavy imports happen in the thread. The first page's own
call to the model's cache waits for this load instead of starting another (one lock per cache key). The
garbage collector is paused meanwhile (mha_viz/runtime/gcpause.py). Its first step, import_heavy(), is also what every
page run does before importing the dashboard: one thread imports torch, transformers, plotly and pandas while
the others wait, so no page sees a half-imported module (issue 21 §2.4). It imports what a chart needs first
(import_charts), so a page may send a chart while the rest imports (early.py).

MHA_VIZ_NO_PRELOAD=1 turns it off: then the first page loads what it needs, as under `streamlit run` of a plain
script. With MHA_VIZ_TIMINGS set, the load is one line of kind "preload" (mha_viz/ui/timing.py): ``at`` is when
the model was ready, ``at - s`` when the imports were done. The server says it is ready (GET /ready, ready.py)
only once this load has ended. Then the thread checks the stored first page against the live model, or records it
(record.py; PAGE_CHECKED when done): the page a cold server's first visitor gets before torch (light.py).
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mha_viz.runtime.gcpause import gc_paused

OFF = "MHA_VIZ_NO_PRELOAD"
THREAD = "mha-viz-preload"
_STARTED = threading.Event()
DONE = threading.Event()  # the preload ended: the model loaded (or FAILED says why not); ready.py reads both
FAILED: list[str] = []  # the preload's error, one line, when it could not load the model
PAGE_CHECKED = threading.Event()  # after DONE: the stored first page checked or recorded (record.py), or not
# Streamlit warns about any thread that uses its caches outside a page's run; this one does so on purpose.
_CONTEXT_LOG = "streamlit.runtime.scriptrunner_utils.script_run_context"


def preload_off() -> bool:
    """Whether MHA_VIZ_NO_PRELOAD turns the preload off (set to anything but 0)."""
    return os.environ.get(OFF, "0").strip() not in ("", "0")


def started() -> bool:
    """Whether start() has started the preload in this process."""
    return _STARTED.is_set()


def start() -> threading.Thread | None:
    """Load the bundled model on the CPU in a background thread, once per process. Returns the thread, or
    None when it was started already or MHA_VIZ_NO_PRELOAD is set (to anything but 0)."""
    if _STARTED.is_set() or preload_off():
        return None
    _STARTED.set()
    logging.getLogger(_CONTEXT_LOG).addFilter(lambda record: record.threadName != THREAD)
    thread = threading.Thread(target=_load, name=THREAD, daemon=True)
    thread.start()
    return thread


# What every page imports, in one thread before any page uses them (issue 21 §2.4): plotly imports pandas lazily
# and reads it from sys.modules without waiting for another thread's import to finish ("partially initialized
# module 'pandas' has no attribute 'Series'"); transformers' lazy attributes (AutoConfig) raced the same way
# while the preload imported transformers and the first page loaded another model.
# CHARTS first, on their own: what a chart needs (plotly, and what plotly reads from sys.modules), so that a page can
# send a chart while the rest imports (early.py: the browser fetches Plotly's code meanwhile).
CHARTS = ("numpy", "pandas", "pyarrow", "plotly", "plotly.graph_objects", "plotly.io", "plotly.subplots",
          "plotly.tools")  # fmt: skip
HEAVY = (*CHARTS, "torch", "transformers", "mha_viz.figures", "mha_viz.ui")
_LAZY = {"transformers": ("AutoConfig", "AutoModel", "AutoModelForCausalLM", "AutoModelForSeq2SeqLM", "AutoTokenizer",
                          "PreTrainedModel")}  # fmt: skip
_PLOTLY_OPTIONAL = ("numpy", "pandas", "orjson")  # what plotly's validators ask _plotly_utils for, lazily
_IMPORT_LOCK = threading.Lock()
_charts = threading.Event()  # CHARTS imported
_imported = threading.Event()  # HEAVY imported


def import_charts() -> None:
    """Import CHARTS once per process, one thread at a time (as import_heavy). A page may draw a chart after it
    while another thread imports the rest of HEAVY: plotly then finds pandas and numpy whole. A thread that finds
    the lock held waits for CHARTS (the event), not for the lock: the holder takes the lock again for HEAVY at
    once (a lock is not fair), and a page that waited for it waited for every import (tests/test_server_ready)."""
    while not _charts.is_set():
        if not _IMPORT_LOCK.acquire(timeout=0.05):
            continue  # the holder imports CHARTS first: the event says when they are whole
        try:
            with gc_paused():
                if not _charts.is_set():
                    _import(CHARTS)
                    from _plotly_utils.optional_imports import get_module

                    for name in _PLOTLY_OPTIONAL:
                        get_module(name)
                    _charts.set()
        finally:
            _IMPORT_LOCK.release()


def importing() -> bool:
    """Whether HEAVY is not imported yet in this process (a page would wait for it)."""
    return not _imported.is_set()


def import_heavy() -> None:
    """Import HEAVY once per process, one thread at a time: a caller that comes while another imports waits for
    it, so no thread ever sees a half-imported module. The preload thread calls it first; each page run calls
    it before importing the dashboard (app.py), which then costs nothing."""
    if _imported.is_set():
        return
    import_charts()
    with _IMPORT_LOCK, gc_paused():
        if not _imported.is_set():
            _import(HEAVY)
            _imported.set()


def _import(names: tuple[str, ...]) -> None:
    for name in names:
        module = importlib.import_module(name)
        for attr in _LAZY.get(name, ()):
            getattr(module, attr)


def _load() -> None:
    try:
        with gc_paused():
            import_heavy()
            # The imported modules out of the collector's sight now, not after the load: freeze_heap's collection
            # (ui/memo.py) then walks only the model's objects (0.01 s), not every module's (0.5-0.8 CPU s on the
            # way to the first page). The imports' dead cycles (~12,000 objects; no change in RSS) stay frozen
            # until a dropped model thaws the heap (memo.release_dropped).
            gc.freeze()
            from mha_viz.ui.cache import get_model  # torch, Streamlit's elements, the dashboard's code
            from mha_viz.ui.timing import timed_run

            with timed_run("preload"):
                get_model("", "cpu")  # the default page's model: transformers' modeling code, the weights
    except Exception as e:  # the page's own call reports it to the person; /ready answers 503 (ready.py)
        FAILED.append(f"{type(e).__name__}: {e}".splitlines()[0][:300])
        logging.getLogger("mha_viz.serve.start").warning("the preload could not load the model: %s", FAILED[-1])
    finally:
        DONE.set()
    try:  # after DONE: /ready says ok as soon as the model is loaded; the stored first page is checked after it
        if not FAILED:
            from mha_viz.serve.record import check_or_record

            check_or_record()  # a rejected or failed check is logged there
    finally:
        PAGE_CHECKED.set()


@asynccontextmanager
async def lifespan(_app: object) -> AsyncIterator[None]:
    """st.App's lifespan hook: start the preload, then serve."""
    start()
    yield

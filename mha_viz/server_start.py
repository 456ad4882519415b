"""Work started with the server, before anyone visits: the bundled model loads in a background thread (and with
it torch, transformers and the dashboard's code) while the first browser is still fetching the page's code.

`streamlit run app.py` finds app.py's ``app = st.App(...)`` and serves it (Streamlit's ASGI mode); the App's
lifespan calls start() once, when the server starts. This module is light on purpose (importing it imports
nothing heavy), so the server answers at once; the heavy imports happen in the thread. The first page's own
call to the model's cache waits for this load instead of starting another (one lock per cache key). The
garbage collector is paused meanwhile (mha_viz/gcpause.py).

MHA_VIZ_NO_PRELOAD=1 turns it off: then the first page loads what it needs, as under `streamlit run` of a plain
script. With MHA_VIZ_TIMINGS set, the load is one line of kind "preload" (mha_viz/ui/timing.py): ``at`` is when
the model was ready, ``at - s`` when the imports were done.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mha_viz.gcpause import gc_paused

OFF = "MHA_VIZ_NO_PRELOAD"
THREAD = "mha-viz-preload"
_STARTED = threading.Event()
# Streamlit warns about any thread that uses its caches outside a page's run; this one does so on purpose.
_CONTEXT_LOG = "streamlit.runtime.scriptrunner_utils.script_run_context"


def start() -> threading.Thread | None:
    """Load the bundled model on the CPU in a background thread, once per process. Returns the thread, or
    None when it was started already or MHA_VIZ_NO_PRELOAD is set (to anything but 0)."""
    if _STARTED.is_set() or os.environ.get(OFF, "0").strip() not in ("", "0"):
        return None
    _STARTED.set()
    logging.getLogger(_CONTEXT_LOG).addFilter(lambda record: record.threadName != THREAD)
    thread = threading.Thread(target=_load, name=THREAD, daemon=True)
    thread.start()
    return thread


def _load() -> None:
    with contextlib.suppress(Exception), gc_paused():  # the page's own call reports any error to the person
        from mha_viz.ui.cache import get_model  # torch, Streamlit's elements, the dashboard's code
        from mha_viz.ui.timing import timed_run

        with timed_run("preload"):
            get_model("", "cpu")  # the default page's model: transformers' modeling code, the weights


@asynccontextmanager
async def lifespan(_app: object) -> AsyncIterator[None]:
    """st.App's lifespan hook: start the preload, then serve."""
    start()
    yield

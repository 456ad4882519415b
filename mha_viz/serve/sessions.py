"""When a page stream closes in hosted mode (issue 35 §4.5): its session goes at once, and freed memory goes back.

Streamlit keeps a disconnected session for two minutes so that a browser can resume it (its session state, the
files its download buttons serve, its uploads), and frees it later still (its store expires lazily); the heap it
used stays with the process, as no page run follows to trim it. Measured: 40 sessions on a 512-token Heads page
left a hosted MiniLM server at +430 MB for good. In hosted mode every page's state is in its link (the widgets
are bound to the query string), so a browser that reconnects gets a fresh session on the same page: the session
is shut down when its stream closes, and the heap is trimmed (runtime.allocator.release_memory) a moment later,
once per burst of closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from mha_viz.config import hosted
from mha_viz.runtime.allocator import release_memory

TRIM_AFTER_S = 1.0  # closes within this time share one trim
_pending: dict[str, Any] = {}


def ended(runtime: Any, session_id: str) -> None:
    """After Streamlit's disconnect_session (on the event loop): in hosted mode, shut the session down and
    trim the heap soon after."""
    if not hosted():
        return
    with contextlib.suppress(Exception):  # gone already
        runtime.close_session(session_id)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not on the event loop (Streamlit calls it there): trim now
        release_memory()
        return
    if _pending.get("trim") is None:
        _pending["trim"] = loop.call_later(TRIM_AFTER_S, _trim, loop)


def _trim(loop: asyncio.AbstractEventLoop) -> None:
    _pending["trim"] = None
    loop.run_in_executor(None, release_memory)  # under a millisecond to tens of them: off the event loop

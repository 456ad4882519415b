"""Stop a page's work when its session is gone (issue 21 §2.6: a 1,200-token SmolLM2 page ran ≈11 s of CPU after
its browser had left).

When a websocket closes, Streamlit asks the session's script to stop (WebSocketSessionManager.disconnect_session
calls request_script_stop), but the script only sees the request at its next ``st.*`` call: a model pass or a
logit lens in between runs to its end. stop_if_gone() is that check without drawing anything: it raises
Streamlit's own StopException, which the script runner handles as it does at an ``st.*`` call. It is called
before every cached computation (ui/memo.py) and before each module of a shared model runs (watch_model), so a
page stops within one layer of its client leaving. Outside a page's run (the preload thread, the CLI, tests
without Streamlit) it does nothing.

It reads the run's pending request (ScriptRequests._state: Streamlit has no public way to look without
consuming a rerun request); if that attribute ever goes away the check does nothing and
tests/test_server_hardening.py says so.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.exceptions import StopException
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType

_LOCAL = threading.local()  # .off: checks skipped in this thread (a model's load: it must finish for the next page)


def session_gone() -> bool:
    """Whether the page run in this thread was asked to stop (its client disconnected, or pressed Stop)."""
    if getattr(_LOCAL, "off", 0):
        return False
    ctx = get_script_run_ctx(suppress_warning=True)
    requests = None if ctx is None else ctx.script_requests
    return requests is not None and getattr(requests, "_state", None) == ScriptRequestType.STOP


def stop_if_gone() -> None:
    """Raise StopException when the session running this page is gone (see the module's docstring)."""
    if session_gone():
        raise StopException()


@contextlib.contextmanager
def unchecked() -> Iterator[None]:
    """No stop checks in this thread for the block (a shared model's load finishes for whoever asks next)."""
    _LOCAL.off = getattr(_LOCAL, "off", 0) + 1
    try:
        yield
    finally:
        _LOCAL.off -= 1


def _pre_hook(_module: torch.nn.Module, _args: object) -> None:
    stop_if_gone()


def watch_model(model: torch.nn.Module) -> None:
    """Check for a gone session before each of the model's modules runs (one thread-local lookup each: a few
    microseconds against milliseconds of work). Call it at load time, before the model is shared."""
    for module in model.modules():
        module.register_forward_pre_hook(_pre_hook)

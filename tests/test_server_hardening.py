"""A hosted server that no client can wear down (issue 21 §2.1, §2.3, §2.4, §2.6): real `streamlit run app.py`
servers and raw websocket clients (tests/stream_client.py), plus the mechanisms on their own."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from streamlit.runtime.scriptrunner import add_script_run_ctx
from streamlit.runtime.scriptrunner_utils.exceptions import StopException
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequests

from mha_viz.serve import limits as server_limits
from mha_viz.ui import guard, memo
from mha_viz.ui.model_store import ModelStore
from tests.stream_client import clear_cache, frame, open_silent, rerun, run_async, run_page, serve

SMOLLM2 = "src=SmolLM2-135M+%28bundled%29"
LONG_TEXT = "+".join(["the animal did not cross the street because it was too tired"] * 40)  # 512 tokens (cut)


# --- §2.1: a client cannot drop the shared models; a dropped model is freed ------------------------------------
def test_a_script_cannot_make_the_server_reload_its_models(tmp_path: Path) -> None:
    """Started afresh, the server first gets 8 pages at once (§2.4, _check_first_pages); then a raw client sends
    Streamlit's clear_cache before each page: the server neither drops SmolLM2 nor grows (main: each cycle reloaded
    it and kept the old one frozen, +520 MB per cycle). (The 8 first pages were also test_eight_concurrent_first_
    pages_after_a_start, on a fresh start of its own: the same check on a second start, folded here.)"""
    query = f"{SMOLLM2}&text=the+cat+sat&view=Heads"
    with serve(tmp_path) as server:
        _check_first_pages(run_async(_all_at_once(server.ws_url)))
        run_async(run_page(server.ws_url, ""))  # the bundled model first (the preload's)
        first = run_async(run_page(server.ws_url, query))
        assert first.finished and not first.errors, first.errors
        before = server.rss_mb()
        for _ in range(3):
            page = run_async(run_page(server.ws_url, query, before=(clear_cache(),)))
            assert page.finished and not page.errors, page.errors
        rise = server.rss_mb() - before
        assert rise < 200, f"the server grew {rise:.0f} MB over 3 clear_cache cycles"
        assert server.log_text().count("refused a clear_cache message") == 3


class _Model:
    """Stands for a loaded model: a reference cycle (as transformers' modules have) around a tensor."""

    def __init__(self) -> None:
        self.me = self
        self.weights = torch.zeros(1000)


def test_a_dropped_model_is_freed_although_the_heap_is_frozen() -> None:
    """Evicted from a full store, a model in reference cycles is collected although loads freeze the heap; one
    that a running request still holds is freed before a later run once that request let it go."""
    store: ModelStore[_Model] = ModelStore(max_entries=1)
    before = memo.dropped_alive()  # a model an earlier test of this worker dropped may still be held
    try:
        first = weakref.ref(store.get("a", _Model))
        assert gc.get_freeze_count() > 0 and first() is not None
        store.get("b", _Model)  # "a" is dropped
        assert first() is None
        held = store.get("a", _Model)  # a running request holds it
        second = weakref.ref(held)
        store.get("b", _Model)
        assert second() is not None and memo.dropped_alive() == before + 1
        del held  # the request ended
        memo.collect_garbage()  # before the next run
        assert second() is None and memo.dropped_alive() <= before
        assert store.get("b", lambda: pytest.fail("loaded again")) is not None
    finally:
        gc.unfreeze()


# --- §2.4: concurrent first pages right after a start ------------------------------------------------------------
FIRST_PAGES = ("view=W%5EO", "view=Heads", "view=Overview", "view=Lesson", "view=Head+roles", "view=Lines",
               "view=Step+by+step", f"{SMOLLM2}&view=Next+token&text=the+cat+sat")  # fmt: skip


async def _all_at_once(url: str) -> list:
    return await asyncio.gather(*(run_page(url, q) for q in FIRST_PAGES))


def _check_first_pages(pages: list) -> None:
    """The 8 first pages sent at once to a fresh server (SmolLM2 among them, while the preload loads MiniLM) all
    render without error (main: "partially initialized module 'pandas' has no attribute 'Series'", and
    "module 'transformers' has no attribute 'AutoConfig'" for the second model)."""
    for query, page in zip(FIRST_PAGES, pages, strict=True):
        assert page.finished and not page.errors, (query, page.errors)
        assert page.elements > 10, query


# --- §2.3: sessions per client, clients that never read ----------------------------------------------------------
def _closed_by_server(sock: socket.socket) -> bool:
    """Read what the server sent until it closes the connection (True), or until 60 s pass (False)."""
    sock.settimeout(60)
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_sessions_per_client_and_clients_that_never_read(tmp_path: Path) -> None:
    """At most MHA_VIZ_MAX_SESSIONS_PER_CLIENT page streams from one address (main: all 6 opened); a client that
    asks for pages and never reads is dropped once MHA_VIZ_SEND_QUEUE_MB waits for it (main: kept, with all its
    pages); a reading client still gets its page, and closed streams free their places."""
    env = {"MHA_VIZ_MAX_SESSIONS_PER_CLIENT": "3", "MHA_VIZ_SEND_QUEUE_MB": "2"}
    query = f"view=Heads&text={LONG_TEXT}"
    with serve(tmp_path, env) as server:
        first = run_async(run_page(server.ws_url, query))
        assert first.finished and not first.errors and first.sent_bytes < 2 * 2**20, first.errors
        socks = [open_silent(server.port, query) for _ in range(6)]
        opened = [s for s in socks if s is not None]
        assert len(opened) == 3, f"{len(opened)} of 6 page streams opened from one address"
        silent = opened[0]
        for k in range(40):  # one page after another, none read: ~750 kB each, until the server drops it
            try:
                silent.sendall(frame(rerun(f"{query}&k={k}")))
            except OSError:
                break
            if "dropping a page stream" in server.log_text():
                break
            time.sleep(1.5)
        assert _closed_by_server(silent)
        assert "dropping a page stream: over 2 MB waiting to be sent" in server.log_text()
        for s in opened:
            s.close()
        time.sleep(2)  # the server hears the closes
        again = [open_silent(server.port, "view=Heads") for _ in range(3)]
        assert all(s is not None for s in again), "closed streams did not free their places"
        for s in again:
            s.close()
        time.sleep(2)
        last = run_async(run_page(server.ws_url, query))
        assert last.finished and not last.errors, last.errors


def test_the_process_wide_session_cap() -> None:
    """MHA_VIZ_MAX_SESSIONS streams in all; one more is refused before the handshake; other requests pass."""

    async def scenario() -> list[str]:
        opened: list[str] = []
        gate = asyncio.Event()

        async def app(scope, receive, send) -> None:
            if scope["type"] == "websocket":
                await receive()
                await send({"type": "websocket.accept"})
                opened.append(scope["client"][0])
                await gate.wait()
            else:
                opened.append("http")

        guard_app = server_limits.StreamGuard(app, server_limits.Limits(max_sessions=2, max_per_client=5))
        results: list[str] = []

        def stream(host: str) -> asyncio.Task:
            async def run() -> None:
                sent: list[dict] = []
                inbox = asyncio.Queue()
                await inbox.put({"type": "websocket.connect"})

                async def send(message: dict) -> None:
                    sent.append(message)

                scope = {"type": "websocket", "path": "/_stcore/stream", "client": (host, 1)}
                await guard_app(scope, inbox.get, send)
                results.append(f"{host}:{sent[0]['type']}:{sent[0].get('code', '')}")

            return asyncio.create_task(run())

        tasks = [stream("10.0.0.1"), stream("10.0.0.2")]
        await asyncio.sleep(0.05)
        await stream("10.0.0.3")  # refused: two are open
        await guard_app({"type": "http", "path": "/"}, None, None)
        gate.set()
        await asyncio.gather(*tasks)
        return results + opened

    results = run_async(scenario())
    assert "10.0.0.3:websocket.close:1013" in results
    assert "10.0.0.3" not in results and "http" in results
    assert sorted(r for r in results if r.startswith("10.0.0.") and ":" not in r) == ["10.0.0.1", "10.0.0.2"]


def test_limits_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MHA_VIZ_MAX_SESSIONS", "7")
    monkeypatch.setenv("MHA_VIZ_SEND_QUEUE_MB", "0.5")
    monkeypatch.setenv("MHA_VIZ_SEND_STALL_S", "inf")  # unreadable: the default
    monkeypatch.setenv("MHA_VIZ_SEND_TOTAL_MB", "-3")
    limits = server_limits.Limits.from_env()
    assert (limits.max_sessions, limits.queue_bytes) == (7, 2**19)
    assert (limits.stall_s, limits.total_bytes) == (server_limits.Limits.stall_s, server_limits.Limits.total_bytes)


# --- §2.6: a page whose client left stops ------------------------------------------------------------------------
def _in_a_stopped_session(fn) -> BaseException | None:
    """Run ``fn`` in a thread whose page run was asked to stop (as Streamlit does when the websocket closes)."""
    requests = ScriptRequests()
    requests.request_stop()
    caught: list[BaseException | None] = [None]

    def body() -> None:
        try:
            fn()
        except BaseException as exc:  # StopException is a BaseException
            caught[0] = exc

    thread = threading.Thread(target=body)
    add_script_run_ctx(thread, SimpleNamespace(script_requests=requests, session_id="gone"))
    thread.start()
    thread.join(timeout=300)
    return caught[0]


def test_a_page_stops_within_a_module_when_its_session_is_gone() -> None:
    """The shared model's next module and the next cached computation raise StopException in a page run whose
    session is gone (main: the whole pass ran; Streamlit only looks at its next st.* call)."""
    from mha_viz.pipeline import road as pipeline
    from mha_viz.ui.cache import get_model, get_recording

    lm = get_model("", "cpu")
    ids = torch.tensor([[101, 1996, 4937, 102]])
    assert isinstance(_in_a_stopped_session(lambda: lm.model(ids)), StopException)
    ran: list[int] = []
    cached = memo.sized_cache(4, 1)(lambda x: ran.append(x))
    assert isinstance(_in_a_stopped_session(lambda: cached(1)), StopException) and not ran
    assert isinstance(_in_a_stopped_session(lambda: get_recording("", "cpu", "a gone page", None)), StopException)
    assert _in_a_stopped_session(lambda: pipeline.load) is None  # no model runs: nothing to stop
    with guard.unchecked():
        assert not guard.session_gone()
    lm.model(ids)  # outside a page run: never stopped

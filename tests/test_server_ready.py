"""GET /ready (mha_viz/serve/ready.py, issue 36 §6): a real `streamlit run app.py` says ready only once its preload
has loaded the model; Streamlit's /_stcore/health says ok before that. Checked with the probe that Docker's
HEALTHCHECK runs (the Dockerfile's own command) and with HAProxy on deploy/haproxy.cfg, which sends no visitor to the
replica before it is ready; then the first page run (a protocol-level client, as a browser's first visit) draws a
heatmap. The same start shows that the model is loaded before any visit and that the server stops cleanly."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mha_viz.serve import ready
from mha_viz.serve import start as server_start
from tests.stream_client import first_run, run_async, serve

ROOT = Path(__file__).resolve().parents[1]
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
READY_TIMEOUT_S = 300
# HAProxy 2.6 counts a server up until its first check fails (2.6 has no init-state); with `inter 2s` that check
# comes within 2 s of its start. Observed through the proxy only after that.
PROXY_FIRST_CHECK_S = 2.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode(errors="replace").strip()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace").strip()
    except OSError:
        return 0, ""


def _docker_healthcheck(url: str) -> int:
    """The Dockerfile's HEALTHCHECK command, run against ``url`` instead of port 8501: its exit status."""
    text = (ROOT / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"HEALTHCHECK [^\n]*\\\n\s*CMD (\[.*\])", text).group(1))
    cmd = [sys.executable if c == "python" else c.replace("http://127.0.0.1:8501", url) for c in cmd]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=60).returncode


@contextlib.contextmanager
def _haproxy(app: str) -> Iterator[str]:
    """HAProxy with deploy/haproxy.cfg in front of ``app`` (as both replicas); yields its URL once its first
    health check had time to run."""
    assert os.access(HAPROXY, os.X_OK), "HAProxy not found (Debian: apt-get install haproxy)"
    port = _free_port()
    host = app.removeprefix("http://")
    env = {**os.environ, "MHA_VIZ_PROXY_BIND": f"127.0.0.1:{port}", "MHA_VIZ_APP1": host, "MHA_VIZ_APP2": host}
    config = str(ROOT / "deploy" / "haproxy.cfg")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proc = subprocess.Popen([HAPROXY, "-db", "-f", config], env=env, **quiet)
    try:
        time.sleep(PROXY_FIRST_CHECK_S)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _first_page(ws_url: str) -> tuple[list[str], list[str]]:
    """A first visit's page run (the default page): the plotly traces' types it drew, and its errors."""
    charts, errors = await _timed_first_page(ws_url)
    return [t for _, types in charts for t in types], errors


def test_ready_only_after_the_preload_then_the_first_page_draws_a_heatmap(tmp_path: Path) -> None:
    timings = tmp_path / "t.jsonl"
    env = {"MHA_VIZ_TIMINGS": str(timings), server_start.OFF: "0", "MHA_VIZ_PAGE_STORE": str(tmp_path / "store")}
    with serve(tmp_path, env) as server:  # returns once /_stcore/health says ok
        url = f"http://127.0.0.1:{server.port}"
        with _haproxy(url) as proxied:
            seen: list[tuple[float, float, int, str, int]] = []  # sent, answered, /ready, its body, proxy's GET /
            docker_while_loading = None
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not seen or seen[-1][2] != 200:
                assert time.monotonic() < deadline, f"not ready in {READY_TIMEOUT_S} s: {server.log_text()[-2000:]}"
                assert _status(f"{url}/_stcore/health") == (200, "ok")
                sent = time.time()
                code, body = _status(url + ready.ROUTE)
                answered = time.time()
                if code == 503 and docker_while_loading is None:
                    docker_while_loading = _docker_healthcheck(url)
                seen.append((sent, answered, code, body, _status(proxied + "/")[0]))
                time.sleep(0.2)
            assert timings.exists(), "/ready said ok before the preload had loaded the model"
            loaded = [json.loads(x) for x in timings.read_text().splitlines() if json.loads(x)["kind"] == "preload"]
            assert len(loaded) == 1, timings.read_text()
            # the model is loaded although no page was ever asked for (what was test_server_start's own start)
            assert [json.loads(x)["kind"] for x in timings.read_text().splitlines()] == ["preload"]
            assert "missing ScriptRunContext" not in server.log_text()  # the preload's own use of the cache
            model_ready = loaded[0]["at"]  # unix time the preload's model load ended
            waiting = [s for s in seen if s[2] != 200]
            assert waiting, "never saw /ready say 503 while the preload ran"
            assert {(code, body) for _, _, code, body, _ in waiting} == {(503, "loading the model")}
            assert all(sent < model_ready + 1.0 for sent, *_ in waiting)  # 503 only before the model was loaded
            assert seen[-1][1] >= model_ready  # ok only after it
            assert seen[-1][3] == "ok"
            assert {p for *_, p in waiting if p} <= {503}  # the proxy sent no one to the loading replica
            assert docker_while_loading == 1
            assert _docker_healthcheck(url) == 0
            proxy_deadline = time.monotonic() + 60  # HAProxy checks a down replica every second (downinter)
            while _status(proxied + "/")[0] != 200:
                assert time.monotonic() < proxy_deadline, "HAProxy did not take the ready replica"
                time.sleep(0.3)
        traces, errors = run_async(_first_page(server.ws_url))
        assert not errors, errors
        assert "heatmap" in traces, traces
    # Streamlit's st.App server shuts down on SIGTERM, then lets it end the process (serve() kills it after 30 s)
    assert server.proc.returncode in (0, -signal.SIGTERM), server.log_text()[-2000:]


def test_ready_is_health_when_the_preload_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(server_start.OFF, "1")
    assert ready.preload_state() == (True, "ok")
    monkeypatch.setenv(server_start.OFF, "0")
    if not server_start.started():  # this test process never started the preload
        assert ready.preload_state() == (False, "the preload has not started")


def test_a_preload_that_cannot_load_the_model_is_never_ready(tmp_path: Path) -> None:
    """A model cache that is a file, not a folder: the bundled model cannot be extracted; /ready's state says so
    for good (the error goes to the log, not to the public answer)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    code = """
from mha_viz.serve import ready, start
thread = start.start()
assert ready.preload_state() == (False, "loading the model"), ready.preload_state()
thread.join(timeout=300)
print(ready.preload_state()[0], ready.preload_state()[1], start.FAILED[0].split(":")[0], sep="|")
"""
    env = {**os.environ, "MHA_VIZ_CACHE": str(blocker), server_start.OFF: "0"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    state, why, error = done.stdout.strip().split("|")
    assert (state, why) == ("False", "the preload could not load the model (see the server's log)")
    assert error and "could not load the model" in done.stderr


def test_probe_says_no_when_nothing_answers() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    ok, answer = ready.probe(url)
    assert not ok and answer.startswith("no answer")
    assert ready.main([url]) == 1


async def _timed_first_page(ws_url: str) -> tuple[list[tuple[float, list[str]]], list[str]]:
    """A first visit's page run, sent at once: (unix time it arrived, its trace types) for each chart, and its
    errors."""
    charts, errors = [], []
    for at, _, delta in await first_run(ws_url):
        if delta.WhichOneof("type") != "new_element":
            continue
        element = delta.new_element
        kind = element.WhichOneof("type")
        if kind == "plotly_chart" and element.plotly_chart.spec:
            data = json.loads(element.plotly_chart.spec).get("data", [])
            charts.append((at, [t.get("type", "scatter") for t in data]))
        elif kind == "exception" or (kind == "alert" and element.alert.format == element.alert.ERROR):
            errors.append(str(element)[:300])
    return charts, errors


def test_a_cold_servers_first_page_sends_a_chart_while_the_preload_still_imports(tmp_path: Path) -> None:
    """A visitor who comes while the preload imports torch and transformers gets a chart at once (serve/early.py:
    the browser fetches Plotly's code meanwhile, not after), and the page then draws its heatmap with no error:
    the early chart reads no half-imported module."""
    timings = tmp_path / "t.jsonl"
    no_store = {"MHA_VIZ_PAGE_STORE": str(tmp_path / "first-page")}  # empty: no stored first page (serve/light.py)
    with serve(tmp_path, {"MHA_VIZ_TIMINGS": str(timings), server_start.OFF: "0", **no_store}) as server:
        charts, errors = run_async(_timed_first_page(server.ws_url))
        assert not errors, errors
        assert charts and any("heatmap" in types for _, types in charts), charts
        deadline = time.monotonic() + READY_TIMEOUT_S  # the preload writes its timing line, then says ready
        while _status(f"http://127.0.0.1:{server.port}{ready.ROUTE}") != (200, "ok"):
            assert time.monotonic() < deadline, server.log_text()[-2000:]
            time.sleep(0.2)
        loaded = [json.loads(x) for x in timings.read_text().splitlines() if json.loads(x)["kind"] == "preload"]
        assert len(loaded) == 1, timings.read_text()
        imported = loaded[0]["at"] - loaded[0]["s"]  # unix time the preload's imports ended (its model load began)
        assert charts[0][0] < imported, (charts[0][0], imported, server.log_text()[-3000:])
        assert charts[0][1] == ["scatter"]


def test_probe_says_no_when_a_503s_body_never_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loaded server that sends a 503's head but not its body within the probe's timeout: "not ready", no
    traceback (reading the body raised TimeoutError out of the HTTPError handler)."""
    import socket
    import threading

    monkeypatch.setattr(ready, "PROBE_TIMEOUT_S", 0.5)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 40\r\n\r\nnot")
            stop.wait(5)  # the rest of the body never comes

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        ok, answer_text = ready.probe(f"http://127.0.0.1:{listener.getsockname()[1]}")
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert not ok and answer_text.startswith("503: (its body unread")

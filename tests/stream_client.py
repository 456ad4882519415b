"""A real `streamlit run app.py` server and raw websocket clients for it (what a script, not a browser, sends).

Streamlit's protocol: the client sends protobuf BackMsg frames over /_stcore/stream (a page run is a
``rerun_script`` with the page's query string), the server answers with ForwardMsg frames until
``script_finished``. The clients here send no Origin header, as a script would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 180
RUN_TIMEOUT_S = 300


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/_stcore/stream"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def rss_mb(self) -> float:
        import psutil

        return psutil.Process(self.proc.pid).memory_info().rss / 2**20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
            return resp.read().strip() == b"ok"
    except OSError:
        return False


@contextlib.contextmanager
def serve(tmp: Path, env: dict[str, str] | None = None, root: Path = ROOT) -> Iterator[Server]:
    """`streamlit run app.py` on a free port, healthy; stopped afterwards."""
    port = _free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # fmt: skip
    full_env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    log = tmp / f"server-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, port, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(port):
            assert proc.poll() is None, server.log_text()[-3000:]
            assert time.monotonic() < deadline, f"no health in {START_TIMEOUT_S} s: {server.log_text()[-3000:]}"
            time.sleep(0.3)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def run_async(coro: object) -> object:
    """asyncio.run, also from a thread whose event loop is running (Playwright's sync API leaves one in the test
    process after the browser tests): then in a thread of its own."""
    import concurrent.futures

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def rerun(query: str) -> bytes:
    """The BackMsg a browser sends to run the page at ``?query``."""
    msg = BackMsg()
    msg.rerun_script.CopyFrom(ClientState(query_string=query))
    return msg.SerializeToString()


def clear_cache() -> bytes:
    """The BackMsg of the app menu's "Clear cache" (which empties Streamlit's caches for every user)."""
    msg = BackMsg()
    msg.clear_cache = True
    return msg.SerializeToString()


@dataclass
class Page:
    """What the server sent for one run."""

    finished: bool = False
    errors: list[str] = field(default_factory=list)  # st.error bodies and exception boxes
    elements: int = 0
    sent_bytes: int = 0


def _read(msg: ForwardMsg, page: Page) -> None:
    if msg.WhichOneof("type") == "script_finished":
        page.finished = True
    if msg.WhichOneof("type") != "delta" or msg.delta.WhichOneof("type") != "new_element":
        return
    page.elements += 1
    element = msg.delta.new_element
    kind = element.WhichOneof("type")
    if kind == "exception":
        page.errors.append(f"{element.exception.type}: {element.exception.message}")
    elif kind == "alert" and element.alert.format == element.alert.ERROR:
        page.errors.append(element.alert.body)


async def run_page(url: str, query: str, before: tuple[bytes, ...] = ()) -> Page:
    """Open a session, send ``before`` then a run of ``?query``, read until the run finishes."""
    page = Page()
    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60) as ws:
        for frame in before:
            await ws.send(frame)
        await ws.send(rerun(query))
        async with asyncio.timeout(RUN_TIMEOUT_S):
            while not page.finished:
                data = await ws.recv()
                page.sent_bytes += len(data)
                msg = ForwardMsg()
                msg.ParseFromString(data)
                _read(msg, page)
    return page


async def first_run(url: str, query: str = "") -> list[tuple[float, tuple[int, ...], object]]:
    """A new session's run of ``?query``, sent at once: every delta as (unix time it arrived, its delta path, the
    ForwardMsg's delta), until the run finishes."""
    seen = []
    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60) as ws:
        await ws.send(rerun(query))
        async with asyncio.timeout(RUN_TIMEOUT_S):
            while True:
                msg = ForwardMsg()
                msg.ParseFromString(await ws.recv())
                if msg.WhichOneof("type") == "script_finished":
                    return seen
                if msg.WhichOneof("type") == "delta":
                    seen.append((time.time(), tuple(msg.metadata.delta_path), msg.delta))


def frame(payload: bytes) -> bytes:
    """One masked binary websocket frame (as a client sends it)."""
    head = bytes([0x82])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 2**16:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def open_silent(port: int, query: str) -> socket.socket | None:
    """A client that asks for ``?query`` and then never reads a byte (a small receive buffer, so the server's
    messages wait on the server). Returns its socket (close it to end it), or None when the server refused the
    handshake."""
    import base64

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /_stcore/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: streamlit\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)  # byte by byte: nothing after the handshake's headers is read
        if not chunk:
            break
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        sock.close()
        return None
    sock.sendall(frame(rerun(query)))
    return sock


# --- a rerun spam and another person's page (tests/test_rerun_limits.py, benchmarks/bench_rerun_spam.py) ----------
async def spammer(url: str, query: str, seconds: float, every: float, sent: list[int], source: str = "") -> None:
    """One page stream (from address ``source``, else the default) sending a rerun every ``every`` s."""
    addr = {"local_addr": (source, 0)} if source else {}
    try:
        async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60, **addr) as ws:

            async def drain() -> None:
                async for _ in ws:
                    pass

            reader = asyncio.create_task(drain())
            end = time.monotonic() + seconds
            k = 0
            while time.monotonic() < end:
                await ws.send(rerun(f"{query}&k={k % 7}"))  # a few distinct pages, as a spammer would vary them
                sent.append(1)
                k += 1
                await asyncio.sleep(every)
            reader.cancel()
    except (OSError, websockets.exceptions.WebSocketException):
        pass  # refused or dropped by the server


async def timed_page(url: str, query: str, limit_s: float, source: str = "127.0.0.2") -> float | None:
    """Seconds until a page of another person (another address: ``source``) finished; None past limit_s."""
    start = time.monotonic()
    try:
        async with (
            asyncio.timeout(limit_s),
            websockets.connect(url, subprotocols=["streamlit"], max_size=None, local_addr=(source, 0)) as ws,
        ):
            await ws.send(rerun(query))
            while True:
                msg = ForwardMsg()
                msg.ParseFromString(await ws.recv())
                if msg.WhichOneof("type") == "script_finished":
                    return time.monotonic() - start
    except TimeoutError:
        return None


def idle_after(pid: int, limit_s: float, quiet_for: float, idle_cpu: float = 10.0) -> float | None:
    """Seconds from now until process ``pid`` stays under ``idle_cpu`` % of a core for ``quiet_for`` s (None: not
    within limit_s)."""
    import psutil

    proc = psutil.Process(pid)
    proc.cpu_percent(None)
    start, quiet = time.monotonic(), None
    while time.monotonic() - start < limit_s:
        time.sleep(0.5)
        now = time.monotonic()
        if proc.cpu_percent(None) < idle_cpu:
            quiet = quiet or now - 0.5
            if now - quiet >= quiet_for:
                return quiet - start
        else:
            quiet = None
    return None

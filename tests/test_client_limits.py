"""What a script may make a hosted server hold (issue 35 §4.1, §4.8, §4.11): uploads, big websocket frames, the
metrics page, and the upload limit the browser is told. One real `streamlit run app.py` with MHA_VIZ_HOSTED=1 and
small upload caps; raw clients (tests/stream_client.py), not browsers: what an attacker sends."""

from __future__ import annotations

import asyncio
import http.client
import os
import select
import socket
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from mha_viz.cli.app import STREAMLIT_OPTIONS
from mha_viz.config import MAX_UPLOAD_BYTES, MAX_UPLOAD_MB
from tests.stream_client import ROOT, Server, rerun, run_async, serve

OWN = "src=Own+weights"  # the sidebar has a file uploader ("Load weights")
CAPS = {"MHA_VIZ_HOSTED": "1", "MHA_VIZ_SESSION_UPLOAD_MB": "32", "MHA_VIZ_UPLOADS_TOTAL_MB": "40"}
MB = 10**6


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serve(tmp_path_factory.mktemp("client-limits"), CAPS) as s:
        yield s


@dataclass
class Session:
    """A page stream kept open: its session id, the upload limits its file uploaders were given."""

    ws: websockets.ClientConnection
    session_id: str = ""
    uploader_mb: list[int] = field(default_factory=list)

    async def read_until(self, kind: str) -> ForwardMsg:
        async with asyncio.timeout(300):
            while True:
                msg = ForwardMsg()
                msg.ParseFromString(await self.ws.recv())
                if msg.WhichOneof("type") == "new_session":
                    self.session_id = msg.new_session.initialize.session_id
                if msg.WhichOneof("type") == "delta" and msg.delta.new_element.WhichOneof("type") == "file_uploader":
                    self.uploader_mb.append(msg.delta.new_element.file_uploader.max_upload_size_mb)
                if msg.WhichOneof("type") == kind:
                    return msg

    async def upload_urls(self, n: int) -> list[str]:
        """Ask for n upload URLs as the browser does when a file is picked (a file_urls_request)."""
        back = BackMsg()
        back.file_urls_request.request_id = "r"
        back.file_urls_request.file_names.extend(f"w{i}.safetensors" for i in range(n))
        back.file_urls_request.session_id = self.session_id
        await self.ws.send(back.SerializeToString())
        msg = await self.read_until("file_urls_response")
        return [u.upload_url for u in msg.file_urls_response.file_urls]


async def open_session(server: Server, query: str) -> Session:
    ws = await websockets.connect(server.ws_url, subprotocols=["streamlit"], max_size=None, open_timeout=60)
    session = Session(ws)
    await ws.send(rerun(query))
    await session.read_until("script_finished")
    return session


def xsrf(server: Server) -> str:
    """The XSRF cookie /_stcore/health sets: a script echoes it as the header, as the attacker did."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/_stcore/health", timeout=10) as resp:
        cookie = resp.headers.get("Set-Cookie", "")
    return cookie.split("_streamlit_xsrf=", 1)[1].split(";", 1)[0]


def put(server: Server, path: str, size: int) -> int:
    """PUT a file of ``size`` bytes to an upload path; the HTTP status. The headers go first: a server that
    answers within a second (a refusal by Content-Length) never gets the body."""
    token, boundary = xsrf(server), "mhaviz" + os.urandom(8).hex()
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="w.safetensors"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + b"\0" * size
        + f"\r\n--{boundary}--\r\n".encode()
    )
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.putrequest("PUT", path)
        for name, value in (("Content-Type", f"multipart/form-data; boundary={boundary}"), ("X-Xsrftoken", token),
                            ("Cookie", f"_streamlit_xsrf={token}"), ("Content-Length", str(len(body)))):  # fmt: skip
            conn.putheader(name, value)
        conn.endheaders()
        answered, _, _ = select.select([conn.sock], [], [], 1.0)
        if not answered:
            conn.send(body)
        return conn.getresponse().status
    finally:
        conn.close()


def test_uploads_only_for_an_uploader_and_under_caps(server: Server) -> None:
    """No upload URL for a page without a file uploader and no PUT to a file id the server did not give (main:
    204, stored); a file the browser refuses is refused; one session's uploads stop at its cap (413), all
    sessions' at the process cap (503); a session's files are freed when its websocket closes."""

    async def scenario() -> dict[str, object]:
        out: dict[str, object] = {}
        plain = await open_session(server, "view=Heads")
        out["urls without uploader"] = await plain.upload_urls(1)
        made_up = f"/_stcore/upload_file/{plain.session_id}/{'0' * 8}-0000-4000-8000-{'0' * 12}"
        out["PUT to a made-up id"] = await asyncio.to_thread(put, server, made_up, 15 * MB)
        a, b = await open_session(server, OWN), await open_session(server, OWN)
        urls = await a.upload_urls(4)
        out["A's uploader MB"] = a.uploader_mb
        sizes = (MAX_UPLOAD_BYTES, MAX_UPLOAD_BYTES + 60_000, 15 * MB, 15 * MB)  # the last: A's 4th file
        out["A"] = [await asyncio.to_thread(put, server, u, n) for u, n in zip(urls, sizes, strict=True)]
        (b_url,) = await b.upload_urls(1)
        out["B while A holds 31 MB"] = await asyncio.to_thread(put, server, b_url, 15 * MB)
        await a.ws.close()
        await asyncio.sleep(2)
        out["B after A left"] = await asyncio.to_thread(put, server, b_url, 15 * MB)
        await plain.ws.close()
        await b.ws.close()
        return out

    out = run_async(scenario())
    print(out)
    assert out["urls without uploader"] == [] and out["PUT to a made-up id"] == 403
    assert out["A's uploader MB"] == [MAX_UPLOAD_MB]
    assert out["A"] == [204, 413, 204, 413]  # the biggest file the browser takes; one it refuses; the cap
    assert out["B while A holds 31 MB"] == 503
    assert out["B after A left"] == 204
    assert "refused an upload to a file id" in server.log_text()


def test_one_upload_limit_for_browser_server_and_app() -> None:
    """The number the browser is told (MB of 10**6 bytes: Streamlit's FileUploader counts so except on Windows)
    is the one the server and the app check, and Streamlit's own route allows it (main: the browser refused a
    16.06 MB file that the app's 16 MiB limit allowed)."""
    toml = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert MAX_UPLOAD_BYTES == MAX_UPLOAD_MB * 10**6 < 16_060_000
    assert toml["server"]["maxUploadSize"] == MAX_UPLOAD_MB == int(STREAMLIT_OPTIONS["server.maxUploadSize"])


def test_a_huge_frame_is_refused_by_its_header(server: Server) -> None:
    """A frame announcing 100 MB is refused (close 1009) after its first megabyte (main: the server waited for
    all of it, then parsed it)."""
    import base64

    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /_stcore/stream HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: streamlit\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101")
    sock.sendall(bytes([0x82, 0x80 | 127]) + (100 * 2**20).to_bytes(8, "big") + os.urandom(4))
    start = time.monotonic()
    with pytest.raises(OSError):  # the server closes; sending the rest fails, or we read its close frame below
        for _ in range(100):
            sock.sendall(b"\0" * 2**20)
    sock.settimeout(10)
    got = b""
    try:
        while len(got) < 4:
            chunk = sock.recv(64)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    print(f"closed after {time.monotonic() - start:.2f} s; first bytes from the server: {got[:4].hex()}")
    assert got[:1] in (b"\x88", b"")  # a close frame (1009), or the connection already reset


def test_metrics_are_not_public_when_hosted(server: Server) -> None:
    """/_stcore/metrics (live sessions, upload bytes) is not served in hosted mode (main: 200)."""
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/_stcore/metrics", timeout=10)
    assert err.value.code == 404


LONG_TEXT = "+".join(["the animal did not cross the street because it was too tired"] * 40)  # 512 tokens (cut)


def test_ended_sessions_give_their_memory_back(server: Server) -> None:
    """40 sessions ask for a 512-token Heads page (9 at a time) and close: within 5 s the server is back within
    200 MB of where it was (main: +430 MB, held for good: Streamlit kept each closed session two minutes and
    nothing trimmed the heap after)."""
    from tests.stream_client import run_page

    query = f"view=Heads&text={LONG_TEXT}"
    run_async(run_page(server.ws_url, query))
    before = server.rss_mb()

    async def burst() -> list:
        gate = asyncio.Semaphore(9)  # under the per-client session cap

        async def one(k: int) -> object:
            async with gate:
                return await run_page(server.ws_url, f"{query}&k={k}")

        return await asyncio.gather(*(one(k) for k in range(40)))

    pages = run_async(burst())
    assert all(p.finished and not p.errors for p in pages)
    closed, rise = time.monotonic(), server.rss_mb() - before
    while rise >= 200 and time.monotonic() - closed < 5:  # back within 5 s: looked at 4 times a second, not at 5 s
        time.sleep(0.25)
        rise = server.rss_mb() - before
    print(f"RSS {before:.0f} MB before 40 sessions, {before + rise:.0f} MB {time.monotonic() - closed:.1f} s after")
    assert rise < 200, f"+{rise:.0f} MB kept 5 s after 40 sessions closed"


def test_each_message_is_sent_from_the_streams_own_task_and_a_stalled_client_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """serve/limits.py's sender sends every message from its own task under a timer (issue 36 §6: asyncio.wait_for
    made a task and a future for each of a page's ~70 messages, ~3 % of its server CPU), and a client that takes
    nothing for MHA_VIZ_SEND_STALL_S is still dropped. The guard around a websocket app that sends six messages;
    the client's transport takes three and then nothing."""
    from mha_viz.serve.limits import STREAM, StreamGuard
    from mha_viz.serve.settings import Limits

    async def scenario() -> tuple[list[asyncio.Task | None], list[str], bool]:
        senders: list[asyncio.Task | None] = []
        taken: list[str] = []
        app_ended, connected = asyncio.Event(), []

        async def transport_send(message: dict) -> None:  # the client's side of the socket
            if message["type"] != "websocket.send":
                return
            senders.append(asyncio.current_task())
            if len(taken) == 3:
                await asyncio.Event().wait()  # takes nothing more
            taken.append(message["text"])

        async def transport_receive() -> dict:
            if not connected:
                connected.append(True)
                return {"type": "websocket.connect"}
            await asyncio.Event().wait()  # the client says nothing more
            return {}

        async def app(scope: dict, receive: object, send: object) -> None:
            await receive()  # type: ignore[operator]
            await send({"type": "websocket.accept"})  # type: ignore[operator]
            for i in range(6):
                await send({"type": "websocket.send", "text": f"m{i}"})  # type: ignore[operator]
            assert (await receive())["type"] == "websocket.disconnect"  # type: ignore[operator]  # dropped
            app_ended.set()

        guard = StreamGuard(app, Limits(stall_s=0.3))
        scope = {"type": "websocket", "path": "/" + STREAM, "client": ("10.0.0.1", 1)}
        await asyncio.wait_for(guard(scope, transport_receive, transport_send), 10)
        return senders, taken, app_ended.is_set()

    with caplog.at_level("WARNING", logger="mha_viz.serve.limits"):
        senders, taken, ended = asyncio.run(scenario())
    assert taken == ["m0", "m1", "m2"] and ended  # in order; the app heard the drop as a disconnect
    assert len(senders) == 4 and len(set(senders)) == 1  # one task sent them all: none made per message
    assert senders[0] is not None and senders[0].get_name() == "mha-viz-ws-send"
    assert "dropping a page stream: the client took nothing for 0 s" in caplog.text  # stall_s 0.3, printed as 0

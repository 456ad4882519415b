"""What one websocket client may cost the server (issue 21 §2.1, §2.3): an ASGI middleware on Streamlit's page
stream (/_stcore/stream), given to st.App in app.py.

`streamlit run app.py` serves app.py's st.App with uvicorn and Starlette (Streamlit's ASGI mode); st.App takes
user middleware, which sees each websocket's messages both ways before Streamlit's handler does. This module
hooks in there and nowhere else:

- **No client may clear the shared caches.** Streamlit handles a ``clear_cache`` BackMsg from any session by
  emptying st.cache_data and st.cache_resource for every user (AppSession._handle_clear_cache_request); the app's
  menu offers it only in development mode, but a script sends it anyway, with or without an Origin header (a
  script sets any Origin it likes, so the Origin check cannot stop it). Such frames are dropped here, logged.
- **What waits to be sent is bounded.** Streamlit queues up to 500 messages per session for a client that does
  not read (its StarletteSessionClient), and uvicorn holds what the socket would not take: 200 sessions that
  asked for a 512-token Heads page and never read held +2.8 GB. Here every message goes into this session's own
  queue, counted in bytes; the queue is sent on as fast as the client reads. A session whose queue passes
  MHA_VIZ_SEND_QUEUE_MB, whose client has taken nothing for MHA_VIZ_SEND_STALL_S, or that holds the most when
  all sessions together pass MHA_VIZ_SEND_TOTAL_MB, is dropped: its connection is aborted (the bytes go) and
  Streamlit sees the client disconnect (its page run is stopped, ui/guard.py).
- **Sessions are counted.** At most MHA_VIZ_MAX_SESSIONS open page streams in the process and
  MHA_VIZ_MAX_SESSIONS_PER_CLIENT per client address; one more is refused before the handshake (HTTP 403 to the
  websocket's upgrade; the browser's page shows Streamlit's "connection error" and retries).

- **Reruns are admitted** per session and per client address, the latest waiting one replacing the one before
  (reruns.py); **a message over MAX_CLIENT_MESSAGE_BYTES is refused by its frame header** (uvicorn's websocket
  protocol's limit is lowered per connection: Streamlit sets one server.maxMessageSize for both directions).
- Other requests pass, but **uploads** go through uploads.py, and **/_stcore/metrics** is 404 in hosted mode.

Behind a reverse proxy the client address is the proxy's unless uvicorn trusts its X-Forwarded-For
(FORWARDED_ALLOW_IPS; uvicorn trusts 127.0.0.1 by default; deploy/compose.yaml sets it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mha_viz.config import MAX_CLIENT_MESSAGE_BYTES, hosted
from mha_viz.serve.reruns import Reruns, run_finished
from mha_viz.serve.settings import Limits
from mha_viz.serve.uploads import ROUTE as UPLOAD_ROUTE
from mha_viz.serve.uploads import Uploads

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
log = logging.getLogger("mha_viz.serve.limits")
STREAM = "_stcore/stream"
METRICS = "_stcore/metrics"  # live session counts and upload bytes: not for the public (404 in hosted mode)
REFUSED_TYPES = frozenset({"clear_cache"})  # BackMsg types no client may send


def _back_msg_type(data: bytes) -> str | None:
    from streamlit.proto.BackMsg_pb2 import BackMsg

    msg = BackMsg()
    try:
        msg.ParseFromString(data)
    except Exception:  # Streamlit's handler closes the connection on it
        return None
    return msg.WhichOneof("type")


class _Stream:
    """One page stream: its queue of messages waiting to be sent, and the task that sends them."""

    def __init__(self, guard: StreamGuard, send: Send, client: str) -> None:
        self.guard, self._send = guard, send
        self.runs = guard.reruns.open(client)
        self.held: Message | None = None  # a rerun waiting for its admission (reruns.py)
        self._got: asyncio.Future | None = None  # the client's next message, asked for
        self.queue: deque[Message] = deque()
        self.waiting = 0  # bytes in the queue
        self.dropped = asyncio.Event()
        self._ready = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def send(self, message: Message) -> None:
        if self.dropped.is_set():
            from starlette.websockets import WebSocketDisconnect

            raise WebSocketDisconnect(1008)
        if message["type"] == "websocket.accept":
            await self._send(message)
            conn = getattr(getattr(self._send, "__self__", None), "conn", None)  # uvicorn's websockets protocol
            if hasattr(conn, "max_message_size"):  # a bigger frame is refused by its header, before it is read
                conn.max_message_size = MAX_CLIENT_MESSAGE_BYTES
            self._task = asyncio.create_task(self._sender(), name="mha-viz-ws-send")
            return
        if self._task is None:  # refused before the handshake, or Streamlit's own close of a bad frame
            await self._send(message)
            return
        self.queue.append(message)
        size = len(message.get("bytes") or message.get("text") or b"")
        if size <= 1024 and run_finished(message.get("bytes") or b""):
            self.guard.reruns.finished(self.runs)
        self.waiting += size
        self.guard.waiting += size
        self._ready.set()
        if self.waiting > self.guard.limits.queue_bytes:
            self.drop(f"over {self.guard.limits.queue_bytes / 2**20:.0f} MB waiting to be sent")
        elif self.guard.waiting > self.guard.limits.total_bytes:
            max(self.guard.streams, key=lambda s: s.waiting).drop("the most waiting when all sessions were full")

    async def _sender(self) -> None:
        try:
            while True:
                await self._ready.wait()
                while self.queue:
                    message = self.queue[0]
                    try:  # a timer, not wait_for's task and future per message (3 % of a page's server CPU)
                        async with asyncio.timeout(self.guard.limits.stall_s):
                            await self._send(message)
                    except TimeoutError:
                        self.drop(f"the client took nothing for {self.guard.limits.stall_s:.0f} s")
                        return
                    if self.dropped.is_set():
                        return
                    self.queue.popleft()
                    size = len(message.get("bytes") or message.get("text") or b"")
                    self.waiting -= size
                    self.guard.waiting -= size
                    if message["type"] == "websocket.close":
                        return
                self._ready.clear()
        except Exception:  # the client went away: Streamlit hears it from receive
            self._forget()

    def _forget(self) -> None:
        self.guard.waiting -= self.waiting
        self.waiting = 0
        self.queue.clear()

    def drop(self, why: str) -> None:
        """Abort the connection and let go of what waits for it; Streamlit's handler then sees a disconnect."""
        if self.dropped.is_set():
            return
        log.warning("dropping a page stream: %s", why)
        self.dropped.set()
        self._forget()
        transport = getattr(getattr(self._send, "__self__", None), "transport", None)  # uvicorn's protocol
        if transport is not None:
            transport.abort()

    def receive(self, receive: Receive) -> Receive:
        async def guarded() -> Message:
            reruns = self.guard.reruns
            while True:
                if self.dropped.is_set():
                    return {"type": "websocket.disconnect", "code": 1008}
                if self.held is not None and reruns.admit(self.runs):
                    message, self.held = self.held, None
                    return message
                got = self._got = self._got or asyncio.ensure_future(receive())
                gone = asyncio.ensure_future(self.dropped.wait())
                wait = None if self.held is None else reruns.wait_s(self.runs)
                await asyncio.wait({got, gone}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                gone.cancel()
                if not got.done():
                    continue
                message, self._got = got.result(), None
                data = message.get("bytes") if message["type"] == "websocket.receive" else None
                if data and len(data) > MAX_CLIENT_MESSAGE_BYTES:  # where the protocol's own limit did not apply
                    self.drop(f"a message of {len(data):,} bytes from the client")
                    continue
                kind = _back_msg_type(data) if data else None
                if kind in REFUSED_TYPES:
                    log.warning("refused a %s message from a client", kind)
                    continue
                if kind == "rerun_script":
                    if self.held is not None:
                        self.runs.coalesced += 1
                    self.held = message  # the latest rerun wins; it goes on when admitted (above)
                    continue
                if message["type"] == "websocket.disconnect":
                    self.held = None
                return message

        return guarded

    async def close(self) -> None:
        """After Streamlit's handler returned: the rest of the queue goes out (for at most the stall limit)."""
        if self._task is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.guard.limits.stall_s
        while self.queue and not self.dropped.is_set() and not self._task.done() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task
        self._forget()

    def closed(self) -> None:
        """Its websocket is gone: its place in the rerun limits goes, and the client's next message is not awaited."""
        self.guard.reruns.close(self.runs)
        if self._got is not None:
            self._got.cancel()


class StreamGuard:
    """ASGI middleware: the limits above on Streamlit's page stream; every other request passes untouched."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limits: Limits | None = None) -> None:
        self.app = app
        self.limits = limits or Limits.from_env()
        self.streams: set[_Stream] = set()
        self.per_client: dict[str, int] = {}
        self.waiting = 0  # bytes waiting in all streams
        self.reruns = Reruns.from_env()
        self.uploads = Uploads.from_env()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.uploads.attach()  # once the runtime exists: its upload URLs and disconnects go through Uploads
        path = scope.get("path", "").rstrip("/")
        if scope["type"] == "http" and UPLOAD_ROUTE.search(path):
            await self.uploads.guard(scope, receive, send, self.app)
            return
        if scope["type"] == "http" and path.endswith(METRICS) and hosted():
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["type"] != "websocket" or not path.endswith(STREAM):
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        from_client = self.per_client.get(client, 0)
        if len(self.streams) >= self.limits.max_sessions or from_client >= self.limits.max_per_client:
            log.warning("refused a page stream from %s: %d open (%d from it)", client, len(self.streams), from_client)
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1013})
            return
        stream = _Stream(self, send, client)
        self.streams.add(stream)
        self.per_client[client] = self.per_client.get(client, 0) + 1
        try:
            await self.app(scope, stream.receive(receive), stream.send)
        finally:
            self.streams.discard(stream)
            self.per_client[client] -= 1
            if not self.per_client[client]:
                del self.per_client[client]
            stream.closed()
            await stream.close()


def middleware() -> list:
    """st.App's ``middleware`` argument: the StreamGuard."""
    from starlette.middleware import Middleware

    return [Middleware(StreamGuard)]

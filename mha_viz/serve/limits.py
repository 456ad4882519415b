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

Behind a reverse proxy the client address is the proxy's unless uvicorn trusts its X-Forwarded-For
(FORWARDED_ALLOW_IPS; uvicorn trusts 127.0.0.1 by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
log = logging.getLogger("mha_viz.serve.limits")
STREAM = "_stcore/stream"
REFUSED_TYPES = frozenset({"clear_cache"})  # BackMsg types no client may send


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        return default
    return value if value > 0 and value == value and value != float("inf") else default


@dataclass(frozen=True)
class Limits:
    # A session costs ~11-14 MB while it lives (a 512-token Heads page; 200 cost +2.8 GB in the soak):
    # 60 of them ~0.8 GB. The page itself is ~750 kB of messages; 64 MB leaves room for any one page.
    max_sessions: int = 60  # open page streams in the process
    max_per_client: int = 10  # from one client address
    queue_bytes: int = 64 * 2**20  # waiting to be sent to one session
    total_bytes: int = 256 * 2**20  # waiting to be sent to all sessions together
    stall_s: float = 120.0  # a client that takes nothing for this long is dropped

    @classmethod
    def from_env(cls) -> Limits:
        """The limits this deployment sets (MHA_VIZ_MAX_SESSIONS, MHA_VIZ_MAX_SESSIONS_PER_CLIENT,
        MHA_VIZ_SEND_QUEUE_MB, MHA_VIZ_SEND_TOTAL_MB, MHA_VIZ_SEND_STALL_S), defaults where unset or unreadable."""
        d = cls()
        return cls(
            max_sessions=int(_env_number("MHA_VIZ_MAX_SESSIONS", d.max_sessions)),
            max_per_client=int(_env_number("MHA_VIZ_MAX_SESSIONS_PER_CLIENT", d.max_per_client)),
            queue_bytes=int(_env_number("MHA_VIZ_SEND_QUEUE_MB", d.queue_bytes / 2**20) * 2**20),
            total_bytes=int(_env_number("MHA_VIZ_SEND_TOTAL_MB", d.total_bytes / 2**20) * 2**20),
            stall_s=_env_number("MHA_VIZ_SEND_STALL_S", d.stall_s),
        )


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

    def __init__(self, guard: StreamGuard, send: Send) -> None:
        self.guard, self._send = guard, send
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
            self._task = asyncio.create_task(self._sender(), name="mha-viz-ws-send")
            return
        if self._task is None:  # refused before the handshake, or Streamlit's own close of a bad frame
            await self._send(message)
            return
        self.queue.append(message)
        size = len(message.get("bytes") or message.get("text") or b"")
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
                    try:
                        await asyncio.wait_for(self._send(message), self.guard.limits.stall_s)
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
            while True:
                if self.dropped.is_set():
                    return {"type": "websocket.disconnect", "code": 1008}
                got = asyncio.ensure_future(receive())
                gone = asyncio.ensure_future(self.dropped.wait())
                await asyncio.wait({got, gone}, return_when=asyncio.FIRST_COMPLETED)
                gone.cancel()
                if not got.done():
                    got.cancel()
                    continue
                message = got.result()
                data = message.get("bytes") if message["type"] == "websocket.receive" else None
                if data and (kind := _back_msg_type(data)) in REFUSED_TYPES:
                    log.warning("refused a %s message from a client", kind)
                    continue
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


class StreamGuard:
    """ASGI middleware: the limits above on Streamlit's page stream; every other request passes untouched."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limits: Limits | None = None) -> None:
        self.app = app
        self.limits = limits or Limits.from_env()
        self.streams: set[_Stream] = set()
        self.per_client: dict[str, int] = {}
        self.waiting = 0  # bytes waiting in all streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket" or not scope.get("path", "").rstrip("/").endswith(STREAM):
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        from_client = self.per_client.get(client, 0)
        if len(self.streams) >= self.limits.max_sessions or from_client >= self.limits.max_per_client:
            log.warning("refused a page stream from %s: %d open (%d from it)", client, len(self.streams), from_client)
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1013})
            return
        stream = _Stream(self, send)
        self.streams.add(stream)
        self.per_client[client] = self.per_client.get(client, 0) + 1
        try:
            await self.app(scope, stream.receive(receive), stream.send)
        finally:
            self.streams.discard(stream)
            self.per_client[client] -= 1
            if not self.per_client[client]:
                del self.per_client[client]
            await stream.close()


def middleware() -> list:
    """st.App's ``middleware`` argument: the StreamGuard."""
    from starlette.middleware import Middleware

    return [Middleware(StreamGuard)]

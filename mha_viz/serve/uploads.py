"""What uploads may cost the server (issue 35 §4.1): Streamlit's upload route under the app's limits.

Streamlit stores what is PUT to /_stcore/upload_file/{session}/{file id} in memory (MemoryUploadedFileManager)
for any active session and any file id, with no total, until the session is shut down (minutes after its
websocket closed): one script stored 100 × 15 MB in 27 s, although the page it was on had no file uploader.
The browser's own flow is: the person picks a file in a file uploader; the page asks the server for upload URLs
(a ``file_urls_request`` message: Streamlit makes a fresh file id per file); it PUTs the file there; the next run
reads it. Here, with the StreamGuard middleware (limits.py) passing upload requests through Uploads.guard:

- **Only for a page with a file uploader.** Upload URLs are issued only to a session whose latest run drew a file
  uploader (Streamlit's widget registry of that session); a PUT is accepted only for a file id issued to that
  session (the last MAX_ISSUED_UPLOADS kept). Others get HTTP 403 before their body is read.
- **Caps, by the request's Content-Length before its body is read** (required: 411 without it): one file at most
  MAX_UPLOAD_BYTES (plus framing); one session's files (stored and in flight) at most MAX_SESSION_UPLOAD_BYTES
  (413); all sessions' together at most MAX_UPLOADS_TOTAL_BYTES (503: try again later). MHA_VIZ_SESSION_UPLOAD_MB
  and MHA_VIZ_UPLOADS_TOTAL_MB set the last two.
- **A session's files go when its websocket closes** (not minutes later, when Streamlit shuts the session down):
  a browser that reconnects after a network break picks its file again.

It reaches into Streamlit where it has no public hook: the runtime's upload manager (get_upload_urls is
replaced on that instance), the runtime's disconnect_session (the same), and a session's widget registry.
tests/test_client_limits.py checks each against a real server, so an upgrade that moves them fails there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from mha_viz.config import (
    MAX_ISSUED_UPLOADS,
    MAX_SESSION_UPLOAD_BYTES,
    MAX_UPLOAD_BYTES,
    MAX_UPLOAD_FRAMING_BYTES,
    MAX_UPLOADS_TOTAL_BYTES,
)
from mha_viz.serve import sessions
from mha_viz.serve.settings import env_number

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
log = logging.getLogger("mha_viz.serve.uploads")
ROUTE = re.compile(r"/_stcore/upload_file/([^/]+)/([^/]+)/?$")
UPLOADER = "file_uploader_state_value"  # the value type Streamlit registers for a file uploader's widget


async def _answer(send: Send, status: int, text: str) -> None:
    body = text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Uploads:
    """The upload limits of one server process (see the module's docstring)."""

    def __init__(
        self,
        per_session: int = MAX_SESSION_UPLOAD_BYTES,
        total: int = MAX_UPLOADS_TOTAL_BYTES,
        per_file: int = MAX_UPLOAD_BYTES,
    ) -> None:
        self.per_session, self.total, self.per_file = per_session, total, per_file
        self.issued: dict[str, dict[str, None]] = {}  # session -> file ids it may PUT (insertion ordered)
        self.in_flight: dict[str, int] = {}  # session -> bytes of its uploads being received
        self._runtime: Any = None

    @classmethod
    def from_env(cls) -> Uploads:
        """The defaults, with MHA_VIZ_SESSION_UPLOAD_MB and MHA_VIZ_UPLOADS_TOTAL_MB where set."""
        session_mb = env_number("MHA_VIZ_SESSION_UPLOAD_MB", MAX_SESSION_UPLOAD_BYTES / 2**20)
        return cls(
            int(session_mb * 2**20),
            int(env_number("MHA_VIZ_UPLOADS_TOTAL_MB", MAX_UPLOADS_TOTAL_BYTES / 2**20) * 2**20),
        )

    # --- the hooks into Streamlit's runtime ---------------------------------------------------------------------
    def attach(self) -> None:
        """Hook into the running Streamlit runtime, once (called on each request until it exists)."""
        if self._runtime is not None:
            return
        from streamlit.runtime import Runtime

        if not Runtime.exists():
            return
        runtime = Runtime.instance()
        manager = runtime.uploaded_file_mgr
        issue, disconnect = manager.get_upload_urls, runtime.disconnect_session

        def get_upload_urls(session_id: str, file_names: Sequence[str]) -> list:
            if not self.has_uploader(session_id):
                log.warning("refused upload URLs to a session whose page has no file uploader")
                return []
            infos = issue(session_id, list(file_names)[:MAX_ISSUED_UPLOADS])
            ids = self.issued.setdefault(session_id, {})
            for info in infos:
                ids[info.file_id] = None
            while len(ids) > MAX_ISSUED_UPLOADS:
                del ids[next(iter(ids))]
            return infos

        def disconnect_session(session_id: str, **kwargs: Any) -> None:
            disconnect(session_id, **kwargs)
            if not runtime.is_active_session(session_id):
                self.forget(session_id)
                sessions.ended(runtime, session_id)  # hosted: the session goes now, and its memory

        manager.get_upload_urls = get_upload_urls
        runtime.disconnect_session = disconnect_session
        self._runtime = runtime

    def has_uploader(self, session_id: str) -> bool:
        """Whether the session's latest run drew a file uploader (False where that cannot be read)."""
        for _ in range(3):  # the page's run may be adding widgets meanwhile (in its own thread)
            try:
                info = self._runtime._session_mgr.get_active_session_info(session_id)
                widgets = info.session.session_state._new_widget_state.widget_metadata
                return any(getattr(m, "value_type", None) == UPLOADER for m in list(widgets.values()))
            except RuntimeError:  # changed size while it was read
                continue
            except Exception:  # no such session, or Streamlit moved its registry: refuse
                return False
        return False

    def forget(self, session_id: str) -> None:
        """Let go of a session's files and its issued ids (its websocket closed)."""
        self.issued.pop(session_id, None)
        if self._runtime is not None:
            self._runtime.uploaded_file_mgr.remove_session_files(session_id)

    # --- the numbers ----------------------------------------------------------------------------------------------
    def stored(self, session_id: str | None = None, but: str = "") -> int:
        """Bytes stored for one session (all sessions when None), leaving out file id ``but``."""
        storage = self._runtime.uploaded_file_mgr.file_storage
        sessions = [storage.get(session_id, {})] if session_id is not None else list(storage.values())
        return sum(len(f.data) for files in sessions for fid, f in list(files.items()) if fid != but)

    # --- the route -----------------------------------------------------------------------------------------------
    async def guard(self, scope: Scope, receive: Receive, send: Send, app: App) -> None:
        """Pass an upload request on to Streamlit, or answer it with a refusal (a PUT over a limit)."""
        self.attach()
        match = ROUTE.search(scope.get("path", ""))
        if scope.get("method") != "PUT" or match is None or self._runtime is None:
            await app(scope, receive, send)
            return
        session_id, file_id = match.groups()
        if file_id not in self.issued.get(session_id, {}):
            log.warning("refused an upload to a file id this session's file uploader was not given")
            await _answer(send, 403, "No file uploader on this page asked for this upload.")
            return
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"content-length", b"").strip()
        if not raw.isdigit():
            await _answer(send, 411, "An upload needs a Content-Length.")
            return
        size = int(raw)
        if size > self.per_file + MAX_UPLOAD_FRAMING_BYTES:
            await _answer(send, 413, f"A file may have at most {self.per_file:,} bytes.")
            return
        if self.stored(session_id, but=file_id) + self.in_flight.get(session_id, 0) + size > self.per_session:
            log.warning("refused an upload: the session's uploads would pass %d bytes", self.per_session)
            await _answer(send, 413, "This page's uploads would pass its limit; remove a file first.")
            return
        if self.stored() + sum(self.in_flight.values()) + size > self.total:
            log.warning("refused an upload: all uploads would pass %d bytes", self.total)
            await _answer(send, 503, "The server holds too many uploads right now; try again in a minute.")
            return
        self.in_flight[session_id] = self.in_flight.get(session_id, 0) + size
        try:
            await app(scope, receive, send)
        finally:
            self.in_flight[session_id] -= size
            if not self.in_flight[session_id]:
                del self.in_flight[session_id]
            if not self._runtime.is_active_session(session_id):  # it closed while the file came in
                self.forget(session_id)

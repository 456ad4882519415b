"""Readiness (issue 36 §6): GET /ready answers 200 "ok" only when a page can be served, 503 otherwise.

Streamlit's own /_stcore/health says "ok" as soon as its runtime accepts browsers, ~1.5 s after the start,
while the preload (start.py) still imports torch and transformers and loads the model for several seconds more:
a visitor sent there waits for all of it. /ready also waits for the preload's end, so a reverse proxy
(deploy/haproxy.cfg) and Docker's HEALTHCHECK (Dockerfile) send visitors only to a process whose first page is
served at once. It answers 503 with a short reason while Streamlit is not started, while the preload runs, and
for good when the preload could not load the model (the reason goes to the server's log). With the preload off
(MHA_VIZ_NO_PRELOAD=1) it is Streamlit's health: there is nothing more to wait for.

app.py gives routes() to its st.App (a user route, outside Streamlit's reserved /_stcore/). A probe for
HEALTHCHECK, importing nothing heavy: ``python -m mha_viz.serve.ready [URL]`` exits 0 when URL/ready answers
"ok" (default http://127.0.0.1:8501), else 1 with the answer on one line.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from mha_viz.serve import start

ROUTE = "/ready"
DEFAULT_URL = "http://127.0.0.1:8501"
PROBE_TIMEOUT_S = 4.0  # under Docker's HEALTHCHECK --timeout


def preload_state() -> tuple[bool, str]:
    """Whether the preload lets a page be served now, and why not."""
    if start.preload_off():
        return True, "ok"
    if start.FAILED:
        return False, "the preload could not load the model (see the server's log)"
    if start.DONE.is_set():
        return True, "ok"
    return False, "loading the model" if start.started() else "the preload has not started"


async def _ready(request: object) -> object:
    from starlette.responses import PlainTextResponse
    from streamlit.runtime import Runtime

    ok, message = False, "Streamlit's runtime is not started"
    if Runtime.exists():
        ok, message = await Runtime.instance().is_ready_for_browser_connection
    if ok:
        ok, message = preload_state()
    return PlainTextResponse(message, status_code=200 if ok else 503, headers={"Cache-Control": "no-cache"})


def routes() -> list:
    """st.App's ``routes`` argument: GET and HEAD /ready."""
    from starlette.routing import Route

    return [Route(ROUTE, _ready, methods=["GET", "HEAD"])]


def probe(url: str = DEFAULT_URL) -> tuple[bool, str]:
    """Ask ``url``/ready once: (ready, its answer or the error)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + ROUTE, timeout=PROBE_TIMEOUT_S) as resp:
            body = resp.read().decode(errors="replace").strip()
            return resp.status == 200 and body == "ok", body
    except urllib.error.HTTPError as e:
        try:  # the body of a 503 can time out too, under load
            return False, f"{e.code}: {e.read().decode(errors='replace').strip()}"
        except OSError as read_error:
            return False, f"{e.code}: (its body unread: {read_error})"
    except OSError as e:
        return False, f"no answer: {e}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ok, answer = probe(args[0] if args else DEFAULT_URL)
    print(answer if ok else f"not ready: {answer}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The hosted demo past one process (issue 26 §4): two replicas of the app behind a real HAProxy
(deploy/haproxy.cfg, the file deploy/compose.yaml mounts), driven by real browsers.

Streamlit keeps a session in one process: its websocket and the files it serves (a download's data, under /media)
exist only there. The proxy spreads new browsers over the replicas and keeps each on its own by a cookie. Checked:
two browsers land on different replicas; each draws the Heads view through the proxy; a download (data made on
click, over the websocket, then fetched from /media) works in each; and the same media URL asked with the other
replica's cookie is not found — so it is the affinity that makes downloads work, not luck."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from e2e.browser_helpers import EXCEPTION, first_chart, heatmaps
from e2e.conftest import RENDER_TIMEOUT_MS, ROOT, _free_port, _stop, _tail, new_context, serve_app, wait_for_run
from mha_viz.serve.ready import probe

CONFIG = ROOT / "deploy" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
COOKIE = "MHA_VIZ_REPLICA"


@contextlib.contextmanager
def proxy(replicas: list[str], config: Path = CONFIG) -> Iterator[str]:
    """HAProxy with deploy/haproxy.cfg (or ``config``) in front of ``replicas`` (two base URLs); yields its URL."""
    if not os.access(HAPROXY, os.X_OK):
        pytest.fail(
            "HAProxy not found; the replica test needs it (Debian: sudo apt-get install haproxy; "
            "scripts/test.sh installs it when run as root)",
            pytrace=False,
        )
    port = _free_port()
    env = {**os.environ, "MHA_VIZ_PROXY_BIND": f"127.0.0.1:{port}"}
    for i, url in enumerate(replicas, 1):
        env[f"MHA_VIZ_APP{i}"] = url.removeprefix("http://")
    check = subprocess.run([HAPROXY, "-c", "-q", "-f", str(config)], env=env, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    log_dir = Path(tempfile.mkdtemp(prefix="mha-viz-proxy-"))
    log = log_dir / "haproxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240  # the proxy serves once a replica's /ready says ok (its model loaded)
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.read().strip() == b"ok":
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"HAProxy did not serve {url}:\n{_tail(log)}")
            time.sleep(0.3)
        yield url
    finally:
        _stop(proc)
        shutil.rmtree(log_dir, ignore_errors=True)


def wait_ready(url: str, timeout_s: float = 240) -> None:
    """Until ``url``/ready says ok (the replica's preload has loaded the model): HAProxy counts a replica as up for
    its first seconds, before its first check, so a browser sent in earlier lands on a replica the next check marks
    down while it still loads (its page then never runs)."""
    deadline = time.monotonic() + timeout_s
    while not probe(url)[0]:
        if time.monotonic() > deadline:
            pytest.fail(f"{url}/ready never said ok: {probe(url)[1]}")
        time.sleep(0.5)


PROXY_SOURCE = "127.0.0.5"  # stands for the proxy container's address: uvicorn trusts only 127.0.0.1 by itself


def replica_env() -> dict[str, str]:
    """deploy/compose.yaml's app environment (hosted), its proxy's address as the one trusted X-Forwarded-For
    (PROXY_SOURCE on loopback) and 2 page streams per client, the cap the second test counts."""
    import yaml

    app_env = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["x-app"]["environment"]
    return {**app_env, "FORWARDED_ALLOW_IPS": PROXY_SOURCE, "MHA_VIZ_MAX_SESSIONS_PER_CLIENT": "2"}


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[str]]:
    """Two replicas of the app, started once for both tests (a start costs 10-30 s here) and at the same time (a
    start is one Python thread importing, so two share the two cores), each ready."""
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(2) as pool:
        starts = [serve_app(replica_env()) for _ in range(2)]
        entered = [pool.submit(cm.__enter__) for cm in starts]
        wait(entered)
        for cm, future in zip(starts, entered, strict=True):
            if future.exception() is None:  # each replica that started is stopped, whichever failed
                stack.push(cm.__exit__)
        urls = [f.result() for f in entered]  # a start's failure (pytest.fail) is raised here
        list(pool.map(wait_ready, urls))
        yield urls


@pytest.fixture(scope="module")
def proxied(replicas: list[str]) -> Iterator[str]:
    """deploy/haproxy.cfg itself in front of the replicas."""
    with proxy(replicas) as url:
        yield url


def test_two_browsers_two_replicas_each_keeps_its_own(browser: Browser, proxied: str) -> None:
    contexts = [new_context(browser, accept_downloads=True) for _ in range(2)]
    try:
        media: dict[str, str] = {}  # replica -> a media URL made there
        for ctx, word in zip(contexts, ("tired", "wide"), strict=True):  # other texts: other files (media ids
            page = ctx.new_page()  # are content hashes, so the same file made on both replicas has one URL)
            page.goto(f"{proxied}/?view=Heads&text=The+animal+didn't+cross+the+street+because+it+was+too+{word}")
            wait_for_run(page)
            expect(heatmaps(first_chart(page))).to_have_count(12, timeout=RENDER_TIMEOUT_MS)  # the websocket works
            replica = next(c["value"] for c in ctx.cookies() if c["name"] == COOKIE)
            button = page.get_by_role("button", name="Download data (.npz)").first
            button.scroll_into_view_if_needed()
            with page.expect_download() as info:
                button.click()
            download = info.value
            assert download.failure() is None
            assert Path(download.path()).stat().st_size > 1000  # the head's arrays, served by its own replica
            media[replica] = download.url
            expect(page.locator(EXCEPTION)).to_have_count(0)
        assert sorted(media) == ["app1", "app2"]  # round-robin: the second browser went to the other replica
        for replica, url in media.items():
            other = "app2" if replica == "app1" else "app1"
            assert "/media/" in url
            for cookie, status in ((replica, 200), (other, 404)):
                req = urllib.request.Request(url, headers={"Cookie": f"{COOKIE}={cookie}"})
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        got, served_by = resp.status, resp.headers.get("X-MHA-Viz-Replica")
                except urllib.error.HTTPError as err:
                    got, served_by = err.code, err.headers.get("X-MHA-Viz-Replica")
                assert (got, served_by) == (status, cookie), (replica, cookie)
    finally:
        for ctx in contexts:
            ctx.close()


# --- issue 35 §4.4: each visitor has its own caps behind the proxy ------------------------------------------------
async def _streams(url: str, source: str, n: int, kept: list, forwarded: str = "") -> int:
    """Open n page streams through the proxy from local address ``source`` (with a forged X-Forwarded-For when
    given); how many were accepted (they stay open, in ``kept``)."""
    import websockets

    headers = {"X-Forwarded-For": forwarded} if forwarded else None
    got = 0
    for _ in range(n):
        try:
            ws = await websockets.connect(
                url.replace("http://", "ws://") + "/_stcore/stream", subprotocols=["streamlit"], local_addr=(source, 0),
                additional_headers=headers, open_timeout=30,
            )  # fmt: skip
        except websockets.exceptions.InvalidStatus:
            continue
        kept.append(ws)
        got += 1
    return got


async def _three_clients(url: str) -> tuple[int, int, int]:
    kept: list = []
    try:
        return (
            await _streams(url, "127.0.0.2", 6, kept),
            await _streams(url, "127.0.0.3", 6, kept),
            await _streams(url, "127.0.0.2", 4, kept, forwarded="127.0.0.9"),
        )
    finally:
        for ws in kept:
            await ws.close()


def test_two_clients_behind_the_proxy_have_their_own_caps(replicas: list[str], tmp_path: Path) -> None:
    """deploy/compose.yaml trusts its proxy's X-Forwarded-For (main: no FORWARDED_ALLOW_IPS, so every visitor
    counted as the proxy: one client holding 20 streams locked everyone out). The same setting on loopback, the
    proxy connecting from PROXY_SOURCE: client A (127.0.0.2) gets 2 streams per replica, client B (127.0.0.3) still
    gets its own 2 per replica, and A naming another address in X-Forwarded-For gets nothing more."""
    import yaml

    from tests.stream_client import run_async

    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    app_env = compose["x-app"]["environment"]
    assert app_env.get("FORWARDED_ALLOW_IPS") == compose["services"]["proxy"]["networks"]["web"]["ipv4_address"]
    assert replica_env() == {**app_env, "FORWARDED_ALLOW_IPS": PROXY_SOURCE, "MHA_VIZ_MAX_SESSIONS_PER_CLIENT": "2"}
    config = tmp_path / "haproxy.cfg"
    config.write_text(CONFIG.read_text().replace("backend apps\n", f"backend apps\n    source {PROXY_SOURCE}\n"))
    with proxy(replicas, config) as url:  # the replicas the browsers used (their pages closed: no stream left)
        got_a, got_b, forged = run_async(_three_clients(url))
    print(f"through the proxy: A {got_a} of 6 streams, B {got_b} of 6, A with a forged address {forged} of 4")
    assert (got_a, got_b, forged) == (4, 4, 0)

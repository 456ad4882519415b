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
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from e2e.conftest import RENDER_TIMEOUT_MS, ROOT, VIEWPORT, _free_port, _stop, _tail, serve_app, wait_for_run
from e2e.test_browser import EXCEPTION, first_chart, heatmaps

CONFIG = ROOT / "deploy" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
COOKIE = "MHA_VIZ_REPLICA"


@contextlib.contextmanager
def proxy(replicas: list[str]) -> Iterator[str]:
    """HAProxy with deploy/haproxy.cfg in front of ``replicas`` (two base URLs); yields the proxy's URL."""
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
    check = subprocess.run([HAPROXY, "-c", "-q", "-f", str(CONFIG)], env=env, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    log_dir = Path(tempfile.mkdtemp(prefix="mha-viz-proxy-"))
    log = log_dir / "haproxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([HAPROXY, "-db", "-f", str(CONFIG)], env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
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


@pytest.fixture(scope="module")
def proxied() -> Iterator[str]:
    with serve_app({"MHA_VIZ_HOSTED": "1"}) as a, serve_app({"MHA_VIZ_HOSTED": "1"}) as b, proxy([a, b]) as url:
        yield url


def test_two_browsers_two_replicas_each_keeps_its_own(browser: Browser, proxied: str) -> None:
    contexts = [browser.new_context(viewport=VIEWPORT, accept_downloads=True) for _ in range(2)]
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

"""Fixtures for the browser tests: the app served by `streamlit run`, a headless Chromium, a page.

One server and one browser per session (per xdist worker: scripts/test.sh runs the e2e tier over two workers, a
test file whole in one), a fresh page (and so a fresh Streamlit session) per test. A failing test leaves a
full-page screenshot in tests/e2e/artifacts/.
Chromium comes from the system (Debian: apt-get install chromium), never from `playwright install`;
set MHA_VIZ_CHROMIUM to use another binary.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = os.environ.get("MHA_VIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
VIEWPORT = {"width": 1500, "height": 2400}
START_TIMEOUT_S = 90
RUN_TIMEOUT_MS = 90_000  # one script run, model load included
RENDER_TIMEOUT_MS = 60_000  # Plotly is loaded lazily and is slow to draw on a small machine
APP = "[data-testid='stApp']"
NOT_RUNNING = "[data-test-script-state='notRunning']"

expect.set_options(timeout=30_000)


SERVER_LOGS: dict[str, Path] = {}  # app URL -> the server's log file


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report on the item (item.rep_setup, rep_call, rep_teardown) for the page fixture;
    a failed test's report also gets the end of the Streamlit server's log."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    url = getattr(item, "funcargs", {}).get("app_url")
    if report.failed and url in SERVER_LOGS:
        report.sections.append(("streamlit server log (end)", _tail(SERVER_LOGS[url])))
    return report


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200 and resp.read().decode().strip() == "ok"
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def serve_app(env: dict[str, str] | None = None) -> Iterator[str]:
    """`streamlit run app.py` on a free local port (``env`` added to this process's); yields its base URL once it
    is healthy and stops it afterwards."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py",
        "--server.headless", "true",
        "--server.port", str(port),
        "--server.address", "127.0.0.1",
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    log_dir = Path(tempfile.mkdtemp(prefix="mha-viz-e2e-"))
    log = log_dir / "streamlit.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    SERVER_LOGS[url] = log
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with code {proc.returncode} before serving {url}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not answer {url}/_stcore/health within {START_TIMEOUT_S} s:\n{_tail(log)}")
            time.sleep(0.5)
        yield url
    finally:
        _stop(proc)
        SERVER_LOGS.pop(url, None)
        shutil.rmtree(log_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """`streamlit run app.py` on a free local port; yields its base URL and stops it after the session. One server
    for every browser test (each has its own page, so its own Streamlit session): a start costs 10-20 s here."""
    with serve_app() as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Headless system Chromium (never downloaded: `playwright install` is not used here)."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(
            f"Chromium not found at {CHROMIUM}; the browser tests need it. Install it with "
            "`sudo apt-get install chromium` (Debian/Ubuntu), or point MHA_VIZ_CHROMIUM at a Chromium binary.",
            pytrace=False,
        )
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def _artifact_name(node_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", node_name).strip("_") or "test"


# Counts the page's script runs (transitions of stApp's script state to "running") from the page's first element on,
# so that wait_for_run knows a run started even when it was over before the test looked (it waited a fixed second).
RUN_COUNTER = """(() => {
  window.__mhaLoad = Math.random();
  window.__mhaRuns = 0;
  const watch = () => {
    const app = document.querySelector("[data-testid='stApp']");
    if (!app) return false;
    let last = app.getAttribute("data-test-script-state");
    if (last === "running") window.__mhaRuns++;
    new MutationObserver(() => {
      const now = app.getAttribute("data-test-script-state");
      if (now !== last && now === "running") window.__mhaRuns++;
      last = now;
    }).observe(app, {attributes: true, attributeFilter: ["data-test-script-state"]});
    return true;
  };
  const start = () => {
    if (!watch()) new MutationObserver((_, seen) => watch() && seen.disconnect()).observe(
      document.documentElement, {childList: true, subtree: true});
  };
  if (document.documentElement) start(); else document.addEventListener("DOMContentLoaded", start);
})()"""


def new_context(browser: Browser, **options) -> BrowserContext:
    """A browser context (VIEWPORT unless given) whose pages count their script runs (RUN_COUNTER, for wait_for_run)."""
    ctx = browser.new_context(**{"viewport": VIEWPORT, **options})
    ctx.add_init_script(RUN_COUNTER)
    return ctx


@pytest.fixture(scope="session")
def context(browser: Browser) -> Iterator[BrowserContext]:
    """One browser context for the session, so Streamlit's and Plotly's scripts are fetched once."""
    ctx = new_context(browser)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh page (its own Streamlit session); on failure, a full-page screenshot in artifacts/."""
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    reports = [getattr(request.node, f"rep_{when}", None) for when in ("setup", "call")]
    if any(r is not None and r.failed for r in reports):
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / f"{_artifact_name(request.node.name)}.png"
        try:
            pg.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
        except Exception as exc:  # the failure itself matters more than its picture
            print(f"screenshot failed: {exc}")
        if errors:
            print("page errors:\n" + "\n".join(errors))
    pg.close()


_RUNS_SEEN: dict[int, tuple[float, int]] = {}  # id(page) -> (its document's load id, its runs) at the last wait


def wait_for_run(page: Page) -> None:
    """Wait until the script run triggered by the last action is over and everything is drawn.

    In a context made by new_context the page counts its runs: the wait is for one more run than at the last wait (or
    a first run of a newly loaded document), however quickly it ended; an action that starts no run costs a second.
    Elsewhere: up to a second for the state to leave "notRunning" (a run over by then was missed: a second lost)."""
    seen = _RUNS_SEEN.get(id(page), (None, 0))
    started = (
        "([load, seen]) => window.__mhaRuns === undefined || window.__mhaRuns > (window.__mhaLoad === load ? seen : 0)"
    )
    with contextlib.suppress(PlaywrightTimeoutError):  # the state stays "notRunning" until the rerun starts
        page.wait_for_function(started, arg=list(seen), timeout=1000, polling=50)
    counted = page.evaluate("() => window.__mhaRuns === undefined ? null : [window.__mhaLoad, window.__mhaRuns]")
    if counted is None:
        with contextlib.suppress(PlaywrightTimeoutError):
            page.locator(f"{APP}:not({NOT_RUNNING})").wait_for(state="attached", timeout=1000)
    else:
        _RUNS_SEEN[id(page)] = tuple(counted)
    expect(page.locator(f"{APP}{NOT_RUNNING}")).to_be_attached(timeout=RUN_TIMEOUT_MS)
    expect(page.locator("[data-testid='stSkeleton']").filter(visible=True)).to_have_count(0, timeout=RENDER_TIMEOUT_MS)

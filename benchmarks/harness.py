"""Shared by the browser benchmarks: start the real app server, read its metrics, drive system Chromium.

Same setup as tests/e2e (system Chromium, never `playwright install`; the app as `streamlit run`).
"""

from __future__ import annotations

import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("MHA_VIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
SENTENCE = "The animal didn't cross the street because it was too tired"
DONE = "[data-testid='stApp'][data-test-script-state='notRunning']"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.read().strip() == b"ok"
    except OSError:
        return False


class App:
    """`streamlit run app.py` on a free loopback port, stopped on exit (a context manager)."""

    def __init__(self, env: dict[str, str] | None = None, port: int | None = None, script: str = "app.py") -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix="mha-viz-app-", suffix=".log")[1])
        cmd = [
            sys.executable, "-m", "streamlit", "run", script, "--server.headless", "true",
            "--server.port", str(self.port), "--server.address", "127.0.0.1",
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
        ]  # fmt: skip
        self.started = time.perf_counter()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=out, stderr=out)

    def wait(self, timeout: float = 120) -> App:
        deadline = time.monotonic() + timeout
        while not healthy(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the app did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        return self

    def rss_mb(self) -> float:
        """The server's resident memory now (MB)."""
        return _status_mb(self.proc.pid, "VmRSS")

    def peak_mb(self) -> float:
        return _status_mb(self.proc.pid, "VmHWM")

    def metrics(self) -> dict[str, float]:
        """Streamlit's own gauges: active_sessions and cache memory (bytes) by cache."""
        with urllib.request.urlopen(f"{self.url}/_stcore/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            m = re.match(r"^(active_sessions|cache_memory_bytes)(\{[^}]*\})?\s+([0-9.e+]+)$", line)
            if m:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        return out

    def __enter__(self) -> App:
        return self.wait()

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.unlink(missing_ok=True)


class Proxy:
    """HAProxy with deploy/haproxy.cfg on a free loopback port in front of two replica URLs (one replica: the same
    URL twice), stopped on exit (a context manager). HAProxy comes from the system's packages."""

    def __init__(self, replicas: list[str]) -> None:
        first, second = (replicas * 2)[:2]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MHA_VIZ_PROXY_BIND": f"127.0.0.1:{self.port}"}
        env.update(MHA_VIZ_APP1=first.removeprefix("http://"), MHA_VIZ_APP2=second.removeprefix("http://"))
        config = str(ROOT / "deploy" / "haproxy.cfg")
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", config], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)  # fmt: skip

    def __enter__(self) -> Proxy:
        deadline = time.monotonic() + 240  # the proxy serves once a replica's /ready says ok (its model loaded)
        while not healthy(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("HAProxy did not start (Debian: apt-get install haproxy)")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class Busy:
    """``n`` processes that keep a core busy each (a shared user's machine), stopped on exit (a context manager)."""

    def __init__(self, n: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def __enter__(self) -> Busy:
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def _status_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def check_chromium() -> None:
    if not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"Chromium not found at {CHROMIUM}: apt-get install chromium (or set MHA_VIZ_CHROMIUM)")


# The first chart's heatmaps as Plotly drew them (_fullData: typed arrays decoded into rows).
FIRST_GRID_JS = """() => {
  const plot = document.querySelector('.js-plotly-plot');
  if (!plot || !plot._fullData) return null;
  const maps = plot._fullData.filter(t => t.type === 'heatmap');
  if (!maps.length) return null;
  const z = maps[0].z;
  return {n: maps.length, x: Array.from(maps[0].x), z: Array.from(z, row => Array.from(row))};
}"""


# Idle detection for "input to an idle page with the new figures drawn": a MutationObserver notes the last
# change anywhere in the page; the page is idle once the script has run and finished, no element is stale
# and nothing has changed for QUIET_MS. The time taken is the last change minus the input's time.
QUIET_MS = 600
WATCH_JS = """() => {
  const w = window.__mv = {last: performance.now(), runs: 0, drawn: 0, running: false, lt: []};
  const app = document.querySelector("[data-testid='stApp']");
  new MutationObserver(records => {
    // A change inside a <canvas> is its fallback content, which the browser never draws: st.dataframe's grid
    // writes its accessibility table there ~0.25 s after the grid is painted, and that is not a change a user sees.
    const seen = records.filter(r => {  // the canvas itself resized or restyled is a change
      const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      if (!el) return true;
      const up = el.parentElement;
      return !(el.tagName === 'CANVAS' ? r.type === 'childList' : up && up.closest('canvas'));
    });
    if (!seen.length) return;
    w.last = performance.now();
    for (const r of seen) {  // a chart redrawn (not its hover label) also means a run: a fragment's may be too
      const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;  // quick to flip the script state
      if (el && el.closest('.js-plotly-plot') && !el.closest('.hoverlayer')) { w.drawn += 1; break; }
    }
  }).observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
  new MutationObserver(records => {  // every change of the script state means a run started or ended
    w.runs += records.length;
    w.running = app.getAttribute('data-test-script-state') === 'running';
  }).observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
  new PerformanceObserver(l => { for (const e of l.getEntries()) w.lt.push([e.startTime, e.duration]); })
    .observe({type: 'longtask'});
}"""
IDLE_JS = """(q) => { const w = window.__mv; const now = performance.now();
  const st = document.querySelector("[data-testid='stApp']").getAttribute('data-test-script-state');
  const stale = document.querySelectorAll("[data-stale='true']").length;
  const ok = (w.runs > 0 || w.drawn > 0) && !w.running && st === 'notRunning' && !stale && now - w.last > q;
  return {ok: ok, runs: w.runs + w.drawn, last: w.last, lt: w.lt}; }"""


def watch(page) -> None:
    """Install the idle watcher in a loaded page (once per page)."""
    page.evaluate(WATCH_JS)


def timed(page, action, timeout_s: float = 120, optional: bool = False) -> tuple[float, float] | None:
    """Run ``action()`` (a click, a choice) and wait for the page to be idle again.

    Returns (seconds from the input to the last change drawn, seconds of main-thread long tasks meanwhile:
    the browser's own work, mostly Plotly drawing). With ``optional``, an action that starts no script run
    within 10 s (it chose the value already shown) returns None; otherwise that is an error."""
    if hasattr(action, "prepare"):
        action.prepare()
    page.evaluate("() => { const w = window.__mv; w.runs = 0; w.drawn = 0; w.lt = []; w.last = performance.now(); }")
    t0 = page.evaluate("performance.now()")
    action()
    started = time.monotonic()
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        r = page.evaluate(IDLE_JS, QUIET_MS)
        if not r["runs"] and time.monotonic() - started > 10:
            if optional:
                return None
            raise RuntimeError("the action started no script run (did it choose the value already shown?)")
        if r["ok"]:
            busy = sum(d for s, d in r["lt"] if s >= t0)
            return (r["last"] - t0) / 1000, busy / 1000
        time.sleep(0.03)
    raise TimeoutError(f"the page was not idle within {timeout_s} s")


class choose:  # used like a function: timed(page, choose(page, label, option))
    """Pick ``option`` in the Streamlit selectbox labelled ``label``: opening the list is preparation (not
    timed by timed()); the input is the click on the option."""

    def __init__(self, page, label: str, option: str) -> None:
        self.page, self.label, self.option = page, label, option

    def prepare(self) -> None:
        box = self.page.locator(f"input[aria-label='{self.label}']").first
        box.evaluate("e => e.scrollIntoView({block: 'center'})")  # room below it for the list to open
        box.click()
        self.page.get_by_role("option", name=self.option, exact=True).first.wait_for(state="visible")
        time.sleep(0.3)  # the list's opening animation

    def __call__(self) -> None:
        self.page.get_by_role("option", name=self.option, exact=True).first.click()


def open_tab(page, name: str) -> None:
    """Open the view ``name`` as a user does: its group (Learn, Look, Explain, What if) first when its tab is not
    shown. A group opens on its first view, so that one click is the whole switch when ``name`` is that view:
    clicking its tab again would add a click no user makes (and its press and focus states, drawn after the
    figures, would be timed as the switch's last change)."""
    from mha_viz.ui.sidebar import GROUP_OF

    tab = page.get_by_role("tab", name=name, exact=True)
    if tab.count() == 0:
        page.get_by_role("radio", name=GROUP_OF[name], exact=True).click()
        tab.wait_for(timeout=60_000)
        if tab.get_attribute("aria-selected") == "true":
            return
    tab.click()


def median_time(fn, repeats: int) -> tuple[float, object]:
    """The median wall time of ``repeats`` calls of ``fn`` (seconds), and the last call's value."""
    out, value = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        value = fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out), value


def copy_at(rev: str, dest: Path | None = None) -> Path:
    """app.py, mha_viz and .streamlit as committed at ``rev`` (`git archive`), in ``dest`` or a fresh folder: the
    dashboard before a change, served beside the working tree's in the same run."""
    dest = Path(tempfile.mkdtemp(prefix="mha-viz-before-")) if dest is None else dest
    archive = subprocess.run(["git", "archive", rev, "app.py", "mha_viz", ".streamlit"], cwd=ROOT,
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest

"""Every control change on the seed sentence, in Chromium: from the input to an idle page with the new figures drawn.

Run:  python benchmarks/bench_interact.py [--reps 5] [--busy 2] [--tabs "Heads,W^O"] [--before HEAD]
--busy N: N processes keep a core busy each while the dashboard is measured (users' machines are shared).
--before REV: the dashboard as committed at REV (`git archive`) beside this tree's, in one run: both served at
once, each tab switch done on one and then on the other (the same load for both).
The real app (`streamlit run app.py`, bundled MiniLM, the seed sentence) in system Chromium. Each control is
changed --reps times (alternating values, so every change is a real one) and the median is printed with the
target (<= 0.5 s) and two ratios: against the target, and against the floor, a bare Streamlit page whose
selectbox redraws one Plotly heatmap of the same size (benchmarks/floor_app.py). The floor page stays open beside
the dashboard and one floor change is timed before each round of changes, so the floor of each line is measured
under the same load as the line (busy processes included).
Each line also breaks the time down: the server's own time for the reruns (MHA_VIZ_TIMINGS, mha_viz/ui/timing.py)
and the part of it spent handing figures to Streamlit, the browser's main-thread long tasks (mostly Plotly
drawing) and the bytes received over the websocket.
A view in a group that is not open takes two clicks (the group, then its tab): each is timed as its own action, and
the group click's line names the view it opens on the way (docs/tab-speed.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    DONE,
    ROOT,
    App,
    Busy,
    check_chromium,
    choose,
    copy_at,
    open_tab,
    timed,
    watch,
)
from playwright.sync_api import Page, sync_playwright

TARGET_S = 0.5
VIEWPORT = {"width": 1500, "height": 1200}
# Counts every Plotly draw (a chart's plotly_afterplot event): Streamlit draws a chart it mounts twice (first with no
# width, hidden, then at its container's width), and a chart still on the page may be drawn again while it changes.
DRAWS_JS = """() => { window.__draws = 0; const seen = new WeakSet();
  const hook = () => document.querySelectorAll('.js-plotly-plot').forEach(gd => {
    if (!seen.has(gd) && gd.on) { seen.add(gd); gd.on('plotly_afterplot', () => { window.__draws += 1; }); } });
  new MutationObserver(hook).observe(document.body, {subtree: true, childList: true}); setInterval(hook, 5); }"""
CHARTS_JS = "() => document.querySelectorAll('.js-plotly-plot').length"


class Meter:
    """Websocket bytes and the server's timing lines, read around each timed action."""

    def __init__(self, page: Page, timings: Path) -> None:
        self.bytes, self.timings = 0, timings
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload: str | bytes) -> None:
        self.bytes += len(payload)

    def lines(self) -> list[dict]:
        if not self.timings.exists():
            return []
        return [json.loads(x) for x in self.timings.read_text().splitlines() if x.strip()]

    def measure(self, page: Page, action: Callable[[], None]) -> dict[str, float]:
        before_bytes, before_lines = self.bytes, len(self.lines())
        page.evaluate("() => { window.__draws = 0; }")
        took, busy = timed(page, action)
        time.sleep(0.05)  # the last timing line is written just after the run ends
        runs = self.lines()[before_lines:]
        return {
            "s": took,
            "busy": busy,
            "server": sum(r["s"] for r in runs),
            "plot": sum(r["plot_s"] for r in runs),
            "kb": (self.bytes - before_bytes) / 1e3,
            "draws": page.evaluate("() => window.__draws"),  # Plotly draws during the action (DRAWS_JS)
            "charts": page.evaluate(CHARTS_JS),  # charts on the page after it
        }


def median_of(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def report(name: str, m: dict[str, float], floor: float) -> None:
    verdict = "ok" if m["s"] <= TARGET_S else "MISSED"
    print(
        f"  {name:34s} {m['s']:5.2f} s  (target <= {TARGET_S} s: {verdict}; {m['s'] / TARGET_S:4.2f} × target, "
        f"{m['s'] / floor:4.1f} × floor) | server {m['server']:.2f} s (figures {m['plot']:.2f} s), "
        f"browser busy {m['busy']:.2f} s, {m['kb']:.0f} KB, {m['draws']:.0f} chart draws ({m['charts']:.0f} charts)"
    )


class Floor:
    """The floor page (benchmarks/floor_app.py), kept open beside the dashboard: one change of its selectbox is
    timed between the dashboard's actions (sample()), so the floor and the views see the same load (the machine is
    shared: a floor timed once before the dashboard's runs can be off by 2-3 ×)."""

    def __init__(self, browser, app: App) -> None:
        self.page = browser.new_page(viewport=VIEWPORT)
        self.page.goto(app.url)
        self.page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=60_000)
        self.page.wait_for_selector(DONE)
        watch(self.page)
        self.page.evaluate(DRAWS_JS)
        self.times: list[float] = []
        self.draws: list[int] = []

    def sample(self) -> float:
        self.page.bring_to_front()
        self.page.evaluate("() => { window.__draws = 0; }")
        took = timed(self.page, choose(self.page, "Layer", str(1 + len(self.times) % 5)))[0]
        self.times.append(took)
        self.draws.append(self.page.evaluate("() => window.__draws"))
        return took

    def since(self, start: int) -> float:
        """The median of the samples taken since sample number ``start``."""
        return statistics.median(self.times[start:])


def controls(page: Page, meter: Meter, reps: int, floor: Floor, only: str = "") -> dict[str, dict[str, float]]:
    """Median of each control change (each printed when measured, against the floor sampled between its changes);
    the controls sit in the tabs where users meet them."""
    out = {}

    def each(name: str, tab: str, action: Callable[[int], Callable[[], None]]) -> None:
        if only not in name:
            return
        found = page.get_by_role("tab", name=tab, exact=True)
        if found.count() == 0 or found.get_attribute("aria-selected") != "true":
            timed(page, lambda: open_tab(page, tab))
        timed(page, action(0), optional=True)  # fills the caches this control uses (if it changed anything)
        start, samples = len(floor.times), []
        for i in range(1, reps + 1):
            floor.sample()
            page.bring_to_front()
            samples.append(meter.measure(page, action(i)))
        out[name] = median_of(samples)
        report(name, out[name], floor.since(start))

    layers = ["3", "1", "4", "2", "0", "5"]
    each("layer (Heads)", "Heads", lambda i: choose(page, "Layer", layers[i % len(layers)]))
    each("opened head (Heads)", "Heads", lambda i: choose(page, "Open head", f"head {(i % 2) * 7 + 1}"))
    each("focus token (Heads)", "Heads", lambda i: choose(page, "Focus token (query)", ["animal", "it"][i % 2]))
    each("head count (Head count)", "Head count", lambda i: choose(page, "Head count", ["6", "12"][i % 2]))
    modes = ["random orthogonal", "identity (plain concat)"]
    each("W^O mode (W^O)", "W^O", lambda i: lambda: page.get_by_text(modes[i % 2], exact=True).click())
    return out


def tabs(
    sides: list[tuple[Page, Meter]], reps: int, floor: Floor, only: str = "", exact: str = ""
) -> list[dict[str, dict[str, dict[str, float]]]]:
    """Median time to switch to each tab (from the previous one), after a first visit that fills its caches, for
    each dashboard of ``sides`` (page, meter): one switch on each in turn, so that every dashboard meets the same
    load. ``exact``: a comma-separated list of view names, measured in the order of the views.

    A view whose group (Learn, Look, Explain, What if) is not open takes a user two clicks, each waited for: the
    group's button (which opens the group's first view: its own page run and figures) and then the view's tab. Each
    click is timed as its own action, from the click to an idle page: {"tab": the view's own switch, "group": the
    group click before it, when there was one}. (Until issue 36 §6's second pass the two were timed as one action
    whose figures overlapped: a cross-group switch counted the group's first view too.) One floor change is timed
    before each round of switches."""
    from mha_viz.ui.sidebar import VIEWS

    wanted = {x.strip() for x in exact.split(",") if x.strip()}
    names = [n for n in VIEWS if (n in wanted if wanted else only in n)]  # its group opened first when needed
    if len(names) == 1:  # a switch needs a tab to come from
        names.insert(0, next(n for n in VIEWS if n != names[0]))
    for page, _ in sides:
        page.bring_to_front()
        for name in names:  # first visits: computed once per text, then cached
            timed(page, lambda name=name, page=page: open_tab(page, name), optional=True)  # (it may be on it)
    samples = [{n: {"tab": [], "group": []} for n in names} for _ in sides]
    for _ in range(reps):
        floor.sample()
        for name in names:
            for (page, meter), mine in zip(sides, samples, strict=True):
                page.bring_to_front()
                for part, m in switch(page, meter, name).items():
                    mine[name][part].append(m)
    return [
        {n: {part: median_of(s) for part, s in parts.items() if s} for n, parts in mine.items()} for mine in samples
    ]


def switch(page: Page, meter: Meter, name: str) -> dict[str, dict[str, float]]:
    """Open the view ``name`` as a user does, each click timed on its own: {"group": its group's button, when the
    group was not open and ``name`` is not its first view; "tab": the click that opens ``name``}."""
    from mha_viz.ui.sidebar import GROUP_OF, VIEW_GROUPS

    tab = page.get_by_role("tab", name=name, exact=True)
    if tab.count() == 0 and VIEW_GROUPS[GROUP_OF[name]][0] != name:
        group = meter.measure(page, lambda: page.get_by_role("radio", name=GROUP_OF[name], exact=True).click())
        tab.wait_for(timeout=60_000)
        return {"group": group, "tab": meter.measure(page, tab.click)}
    return {"tab": meter.measure(page, lambda: open_tab(page, name))}


def dashboards(browser, floor: Floor, args: argparse.Namespace, roots: list[tuple[str, Path]]) -> None:
    """The dashboards served from ``roots`` ((label, folder): this tree, and a copy at --before), side by side: every
    control on each in turn, then the --tabs switches interleaved, each against the floor sampled between them."""
    with contextlib.ExitStack() as stack:
        sides, labels = [], []
        for label, root in roots:
            timings = Path(tempfile.mkstemp(prefix="mha-viz-timings-", suffix=".jsonl")[1])
            stack.callback(timings.unlink, missing_ok=True)
            with _served_from(root):
                app = stack.enter_context(App(env={"MHA_VIZ_TIMINGS": str(timings)}))
            page = browser.new_page(viewport=VIEWPORT)
            meter = Meter(page, timings)
            page.goto(app.url)
            page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=120_000)
            page.wait_for_selector(DONE)
            watch(page)
            page.evaluate(DRAWS_JS)
            sides.append((page, meter))
            labels.append(label)
        stack.enter_context(Busy(args.busy))
        beside = f", {args.busy} busy processes beside them" if args.busy else ", quiet"
        print(f"Seed sentence, bundled MiniLM{beside}, medians of {args.reps} changes each:")
        if not args.tabs:
            for label, (page, meter) in zip(labels, sides, strict=True):
                print(f"{label}: controls")
                page.bring_to_front()
                controls(page, meter, args.reps, floor, args.only)
        start = len(floor.times)
        results = tabs(sides, args.reps, floor, args.only, args.tabs)
        base = floor.since(start) if len(floor.times) > start else statistics.median(floor.times)
        print(f"floor during the switches: {base:.2f} s per change (median of {len(floor.times) - start})")
        for label, per_tab in zip(labels, results, strict=True):
            print(f"{label}:")
            _tab_lines(per_tab, base)


def _tab_lines(per_tab: dict[str, dict[str, dict[str, float]]], base: float) -> None:
    from mha_viz.ui.sidebar import GROUP_OF, VIEW_GROUPS

    for name, parts in per_tab.items():
        report(f"tab switch → {name}", parts["tab"], base)
        if "group" in parts:
            report(f"  (before it: group → {VIEW_GROUPS[GROUP_OF[name]][0]})", parts["group"], base)
    if not per_tab:
        return
    own = {n: parts["tab"]["s"] for n, parts in per_tab.items()}
    worst, mid = max(own, key=own.get), statistics.median(own.values())
    print(
        f"  tab switches (each click its own action): median {mid:.2f} s = {mid / base:.1f} × floor over {len(own)} "
        f"tabs, slowest {worst} {own[worst]:.2f} s = {own[worst] / base:.1f} × floor; "
        f"{sum(t <= 2.5 * base for t in own.values())} of {len(own)} within 2.5 × floor"
    )


@contextlib.contextmanager
def _served_from(root: Path) -> Iterator[None]:
    """harness.App starts `streamlit run app.py` in ``root`` while inside."""
    import harness

    was, harness.ROOT = harness.ROOT, root
    try:
        yield
    finally:
        harness.ROOT = was


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="changes per control (median)")
    parser.add_argument("--busy", type=int, default=0, help="busy processes beside the dashboard")
    parser.add_argument("--only", default="", help="measure only the controls and tabs whose name contains this")
    parser.add_argument("--tabs", default="", help="only these tab switches (comma-separated view names), no controls")
    parser.add_argument("--before", metavar="REV", help="first the dashboard as committed at REV (e.g. HEAD)")
    args = parser.parse_args()
    check_chromium()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            print(f"load average before: {Path('/proc/loadavg').read_text().split()[:3]}")
            with App(script="benchmarks/floor_app.py") as floor_app:
                floor = Floor(browser, floor_app)
                for _ in range(2):
                    floor.sample()  # warm
                floor.times.clear()
                floor.draws.clear()
                roots = [(f"Before ({args.before})", copy_at(args.before))] if args.before else []
                dashboards(browser, floor, args, [*roots, ("This tree" if args.before else "Dashboard", ROOT)])
            print(f"  (the floor's chart: {statistics.median(floor.draws):.0f} Plotly draws per change; floor over "
                  f"the whole run: median {statistics.median(floor.times):.2f} s, "
                  f"{min(floor.times):.2f}–{max(floor.times):.2f} s)")  # fmt: skip
            print(f"load average after: {Path('/proc/loadavg').read_text().split()[:3]}")
        finally:
            browser.close()


if __name__ == "__main__":
    main()

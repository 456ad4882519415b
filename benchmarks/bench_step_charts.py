"""Step by step's matrices in Chromium: six charts (before) against one stacked chart (now), same run, against the
floor (benchmarks/floor_app.py: one 15 × 15 heatmap redrawn).

Run:  python benchmarks/bench_step_charts.py [--reps 7] [--busy 2]
Each redraw is a change of the values (a new figure of the same shapes); the layouts alternate, so both see the same
load. Printed: the median seconds from the input to an idle page and the browser's busy seconds (main-thread long
tasks), per layout, their ratio to the floor, and the load average before and after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_interact import VIEWPORT, floor_change
from harness import CHROMIUM, CHROMIUM_ARGS, DONE, App, Busy, check_chromium, choose, timed, watch
from playwright.sync_api import sync_playwright

LAYOUTS = ("six charts", "one chart")


def _load() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--busy", type=int, default=0, help="busy processes beside the page")
    args = ap.parse_args()
    check_chromium()
    print(f"load average before: {_load()}")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            with Busy(args.busy):
                floor = floor_change(browser, args.reps)
                times: dict[str, list[tuple[float, float]]] = {k: [] for k in LAYOUTS}
                with App(script="benchmarks/step_charts_app.py") as app:
                    page = browser.new_page(viewport=VIEWPORT)
                    page.goto(app.url)
                    page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=120_000)
                    page.wait_for_selector(DONE)
                    watch(page)
                    k = 0  # every change picks values other than those shown
                    for _ in range(args.reps):
                        for layout in LAYOUTS:
                            timed(page, choose(page, "Layout", layout), optional=True)
                            k += 1
                            times[layout].append(timed(page, choose(page, "Values", str(k % 6))))
        finally:
            browser.close()
    beside = f", {args.busy} busy processes beside it" if args.busy else ""
    print(f"floor (bare Streamlit page, one 15 × 15 heatmap redrawn): {floor:.2f} s{beside}")
    for layout in LAYOUTS:
        s = statistics.median(t for t, _ in times[layout])
        busy = statistics.median(b for _, b in times[layout])
        print(f"  Step by step's 11 matrices as {layout:10s}: {s:5.2f} s = {s / floor:4.1f} × floor, browser busy "
              f"{busy:.2f} s (medians of {args.reps})")  # fmt: skip
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()

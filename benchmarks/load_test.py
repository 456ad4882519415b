"""Many users at once, on loopback: concurrent Chromium sessions typing different sentences.

Run:  python benchmarks/load_test.py [--users 10] [--seconds 150] [--solo-seconds 40]
First one user alone (--solo-seconds), then --users at once (--seconds), on the same server. Each user
(its own browser context, so its own Streamlit session) types a sentence of its own, presses
Ctrl+Enter, waits for the Heads grid, and checks that head 0's weights and labels equal the single-user
result for that sentence (computed here with the same pipeline): results must never cross between
sessions. Bounded: it stops after --seconds (and at most 40 rounds per user). Prints render times
(median, p95), the server's own time per rerun (p50, p95; from the MHA_VIZ_TIMINGS lines the app writes:
target p95 <= 1 s with 10 users), throughput (reruns per second, 10 users against one user alone), errors,
the server's memory over time, and Streamlit's active_sessions after everyone has left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import CHROMIUM, CHROMIUM_ARGS, DONE, FIRST_GRID_JS, App, check_chromium

WORDS = ["tired", "wide", "old", "wet", "busy", "long", "new", "slow", "cold", "dark"]
MAX_ROUNDS = 40
TARGET_P95_S = 1.0  # the server's time per rerun with 10 users


def sentence(user: int, rnd: int) -> str:
    return f"User {user} says the animal didn't cross the street because it was too {WORDS[(user + rnd) % 10]}"


def references(users: int) -> dict[str, tuple[list[str], np.ndarray]]:
    """Single-user results: token labels and head 0's pattern of layer 0 for every sentence used."""
    from mha_viz.config import Config
    from mha_viz.models.load import load_model
    from mha_viz.pipeline.road import traces

    lm = load_model(None, "cpu")
    out = {}
    for u in range(users):
        for r in range(MAX_ROUNDS):
            text = sentence(u, r)
            if text not in out:
                tokens, _, (trace,) = traces(Config(device="cpu"), text, layers=[0], lm=lm)
                out[text] = (list(tokens.labels), trace.pattern[0].numpy())
    return out


async def user(i: int, browser, url: str, deadline: float, refs: dict, log: list) -> None:
    ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await ctx.new_page()
    try:
        await page.goto(url + "/?view=Heads&layer=0", timeout=120_000)  # the grid (layer 0) is the first chart
        await page.wait_for_function(f"({FIRST_GRID_JS})() !== null", timeout=180_000)
        for rnd in range(MAX_ROUNDS):
            if time.monotonic() > deadline:
                break
            text = sentence(i, rnd)
            labels, pattern = refs[text]
            box = page.get_by_label("Text (Ctrl+Enter to apply)", exact=True)
            await box.fill(text)
            t0 = time.perf_counter()
            await box.press("Control+Enter")
            try:
                await page.wait_for_function(
                    f"(want) => {{ const g = ({FIRST_GRID_JS})(); return g && g.x.join('|') === want; }}",
                    arg="|".join(labels),
                    timeout=120_000,
                )
                took = time.perf_counter() - t0
                grid = await page.evaluate(FIRST_GRID_JS)
                diff = float(np.abs(np.asarray(grid["z"], dtype=np.float64) - pattern).max())
                await page.wait_for_selector(DONE, timeout=120_000)
                errors = await page.locator("[data-testid='stException'], [data-testid='stAlert']").count()
                log.append({"user": i, "round": rnd, "seconds": took, "diff": diff, "errors": errors})
            except Exception as exc:  # a timeout is a failed round, reported, not a crash of the test
                log.append(
                    {"user": i, "round": rnd, "seconds": float("nan"), "diff": 1.0, "errors": 1, "exc": str(exc)[:200]}
                )
    finally:
        await ctx.close()


async def phase(browser, url: str, users: int, seconds: float, refs: dict, log: list, memory: list, app) -> float:
    """``users`` at once for ``seconds``; returns the phase's wall seconds (from the first Enter on)."""
    start = time.monotonic()
    deadline = start + seconds
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            memory.append((time.monotonic() - start, app.rss_mb()))
            await asyncio.sleep(10)

    sampler = asyncio.create_task(sample())
    await asyncio.gather(*(user(i, browser, url, deadline, refs, log) for i in range(users)))
    done.set()
    sampler.cancel()
    return time.monotonic() - start


def server_times(path: Path, since: float, until: float) -> list[float]:
    """Seconds of every page or fragment run the server finished between two unix times."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [r["s"] for r in rows if since <= r["at"] <= until and r.get("kind") in ("page", "fragment")]


def summary(name: str, log: list[dict], server: list[float], wall: float) -> float:
    """Print one phase; returns its throughput (reruns the browser saw per second)."""
    times = [r["seconds"] for r in log if r["seconds"] == r["seconds"]]
    bad = [r for r in log if r["diff"] > 1e-5 or r["errors"]]
    rate = len(times) / wall if wall > 0 else float("nan")
    print(f"\n{name}: {len(log)} rounds in {wall:.0f} s ({rate:.2f} reruns/s), {len(bad)} wrong or failed")
    if times:
        print(f"  in the browser, Enter to the new grid: median {statistics.median(times):.2f} s, "
              f"p95 {np.percentile(times, 95):.2f} s, max {max(times):.2f} s")  # fmt: skip
    if server:
        p95 = float(np.percentile(server, 95))
        print(f"  the server's own time per rerun ({len(server)} runs): p50 {statistics.median(server):.3f} s, "
              f"p95 {p95:.3f} s (target <= {TARGET_P95_S} s: {'ok' if p95 <= TARGET_P95_S else 'MISSED'})")  # fmt: skip
    worst = max((r["diff"] for r in log), default=float("nan"))
    print(f"  largest |shown - single-user| weight difference: {worst:.2e} (results uncrossed: "
          f"{'yes' if not bad else 'NO'})")  # fmt: skip
    for r in bad[:5]:
        print("  problem:", r)
    return rate


async def run(users: int, seconds: float, solo_seconds: float) -> None:
    from playwright.async_api import async_playwright

    check_chromium()
    print(f"computing single-user references for {users} users …", flush=True)
    refs = references(users)
    timings = Path(tempfile.mkstemp(prefix="mha-viz-timings-", suffix=".jsonl")[1])
    threads = os.environ.get("MHA_VIZ_TORCH_THREADS", "1")  # a server for many users: one torch thread per request
    with App(env={"MHA_VIZ_TIMINGS": str(timings), "MHA_VIZ_TORCH_THREADS": threads}) as app:
        print(f"server up: {app.rss_mb():.0f} MB resident; torch threads per request: {threads}", flush=True)
        logs: dict[int, list[dict]] = {}
        memory: list[tuple[float, float]] = []
        walls, spans = {}, {}
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for n, secs in ((1, solo_seconds), (users, seconds)):
                if secs <= 0:
                    continue
                logs[n], t0 = [], time.time()
                walls[n] = await phase(browser, app.url, n, secs, refs, logs[n], memory if n == users else [], app)
                spans[n] = (t0, time.time())
            await browser.close()
        await asyncio.sleep(5)  # let the server notice the closed websockets
        metrics = app.metrics()
        rates = {}
        for n in logs:
            # the server's runs while the phase's users typed (their first page loads included)
            rates[n] = summary(f"{n} user{'s' if n > 1 else ''} at once", logs[n], server_times(timings, *spans[n]),
                               walls[n])  # fmt: skip
        if 1 in rates and users in rates and users != 1:
            print(f"\nthroughput with {users} users: {rates[users]:.2f} reruns/s, {rates[users] / rates[1]:.1f}x one "
                  f"user alone ({rates[1]:.2f} reruns/s), same server, same run")  # fmt: skip
        print("server memory (s: MB): " + ", ".join(f"{t:.0f}: {m:.0f}" for t, m in memory))
        print(f"server memory after: {app.rss_mb():.0f} MB resident, peak {app.peak_mb():.0f} MB")
        print(f"active_sessions after everyone left: {metrics.get('active_sessions', float('nan')):.0f}")
    timings.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=150)
    ap.add_argument("--solo-seconds", type=float, default=40, help="one user alone first (0: skip)")
    args = ap.parse_args()
    asyncio.run(run(args.users, min(args.seconds, 900), min(args.solo_seconds, 300)))


if __name__ == "__main__":
    main()

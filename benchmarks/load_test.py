"""Many users at once, on loopback: concurrent Chromium sessions typing different sentences.

Run:  python benchmarks/load_test.py [--users 10] [--seconds 150]
Each user (its own browser context, so its own Streamlit session) types a sentence of its own, presses
Ctrl+Enter, waits for the Heads grid, and checks that head 0's weights and labels equal the single-user
result for that sentence (computed here with the same pipeline): results must never cross between
sessions. Bounded: it stops after --seconds (and at most 40 rounds per user). Prints render times
(median, p95), errors, the server's memory over time, and Streamlit's active_sessions after everyone
has left.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import CHROMIUM, CHROMIUM_ARGS, DONE, FIRST_GRID_JS, App, check_chromium

WORDS = ["tired", "wide", "old", "wet", "busy", "long", "new", "slow", "cold", "dark"]
MAX_ROUNDS = 40


def sentence(user: int, rnd: int) -> str:
    return f"User {user} says the animal didn't cross the street because it was too {WORDS[(user + rnd) % 10]}"


def references(users: int) -> dict[str, tuple[list[str], np.ndarray]]:
    """Single-user results: token labels and head 0's pattern of layer 0 for every sentence used."""
    from mha_viz.config import Config
    from mha_viz.models.load import load_model
    from mha_viz.pipeline import traces

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
        await page.goto(url, timeout=120_000)
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


async def run(users: int, seconds: float) -> None:
    from playwright.async_api import async_playwright

    check_chromium()
    print(f"computing single-user references for {users} users …", flush=True)
    refs = references(users)
    with App() as app:
        print(f"server up: {app.rss_mb():.0f} MB resident", flush=True)
        log: list[dict] = []
        memory: list[tuple[float, float]] = []
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            start = time.monotonic()
            deadline = start + seconds

            async def sample() -> None:
                while time.monotonic() < deadline + 5:
                    memory.append((time.monotonic() - start, app.rss_mb()))
                    await asyncio.sleep(10)

            sampler = asyncio.create_task(sample())
            await asyncio.gather(*(user(i, browser, app.url, deadline, refs, log) for i in range(users)))
            sampler.cancel()
            await browser.close()
        await asyncio.sleep(5)  # let the server notice the closed websockets
        metrics = app.metrics()
        times = [r["seconds"] for r in log if r["seconds"] == r["seconds"]]
        bad = [r for r in log if r["diff"] > 1e-5 or r["errors"]]
        print(f"\n{users} users, {seconds:.0f} s: {len(log)} rounds, {len(bad)} wrong or failed")
        if times:
            p95 = float(np.percentile(times, 95))
            median = statistics.median(times)
            print(f"render time after Ctrl+Enter: median {median:.2f} s, p95 {p95:.2f} s, max {max(times):.2f} s")
        worst = max((r["diff"] for r in log), default=float("nan"))
        verdict = "yes" if not bad else "NO"
        print(f"largest |shown - single-user| weight difference: {worst:.2e} (results uncrossed: {verdict})")
        print("server memory (s: MB): " + ", ".join(f"{t:.0f}: {m:.0f}" for t, m in memory))
        print(f"server memory after: {app.rss_mb():.0f} MB resident, peak {app.peak_mb():.0f} MB")
        print(f"active_sessions after everyone left: {metrics.get('active_sessions', float('nan')):.0f}")
        for r in bad[:5]:
            print("  problem:", r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=150)
    args = ap.parse_args()
    asyncio.run(run(args.users, min(args.seconds, 900)))


if __name__ == "__main__":
    main()

"""The hosted demo past one process (issue 26 §4): ten browser sessions through HAProxy (deploy/haproxy.cfg) in
front of two replicas of the app, against the same proxy in front of one replica, in the same run.

Run:  python benchmarks/bench_replicas.py [--users 10] [--seconds 90]
Each user is load_test's: its own Chromium context (its own Streamlit session, kept on one replica by the proxy's
cookie), typing sentences of its own into the Heads view and checking that the grid equals the single-user result
(results never cross). Printed per setup: rounds, reruns per second, the browser's time from Ctrl+Enter to the new
grid (median, p95), the servers' own time per rerun (p50, p95), wrong results, the replicas' memory; then the
ratio of throughput and p95, 2 replicas against 1. Needs haproxy on the PATH (Debian: apt-get install haproxy).
Each replica runs torch with MHA_VIZ_TORCH_THREADS (default 1), so on an N-core machine up to N replicas add up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import CHROMIUM, CHROMIUM_ARGS, App, Proxy, check_chromium
from load_test import phase, references, server_times, summary


class Replicas:
    """The replicas' memory as one server's, for load_test's sampler."""

    def __init__(self, apps: list[App]) -> None:
        self.apps = apps

    def rss_mb(self) -> float:
        return sum(a.rss_mb() for a in self.apps)


async def setup(n: int, users: int, seconds: float, refs: dict) -> tuple[float, float]:
    """``n`` replicas behind the proxy, ``users`` at once for ``seconds``; returns (reruns/s, p95 s)."""
    from playwright.async_api import async_playwright

    threads = os.environ.get("MHA_VIZ_TORCH_THREADS", "1")
    logs = [Path(tempfile.mkstemp(prefix="mha-viz-timings-", suffix=".jsonl")[1]) for _ in range(n)]
    apps = [App(env={"MHA_VIZ_TIMINGS": str(t), "MHA_VIZ_TORCH_THREADS": threads, "MHA_VIZ_HOSTED": "1"})
            for t in logs]  # fmt: skip
    try:
        for a in apps:
            a.wait()
        with Proxy([a.url for a in apps]) as proxy:
            log: list[dict] = []
            memory: list[tuple[float, float]] = []
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                t0 = time.time()
                wall = await phase(browser, proxy.url, users, seconds, refs, log, memory, Replicas(apps))
                t1 = time.time()
                await browser.close()
        server = [s for t in logs for s in server_times(t, t0, t1)]
        rate = summary(f"{n} replica{'s' * (n > 1)} behind the proxy, {users} users", log, server, wall)
        print("  replicas' memory (s: MB, all replicas): " + ", ".join(f"{t:.0f}: {m:.0f}" for t, m in memory))
        times = sorted(r["seconds"] for r in log if r["seconds"] == r["seconds"])
        p95 = times[min(len(times) - 1, int(0.95 * len(times)))] if times else float("nan")
        return rate, p95
    finally:
        for a in apps:
            a.__exit__()
        for t in logs:
            t.unlink(missing_ok=True)


async def run(users: int, seconds: float) -> None:
    check_chromium()
    print(f"{os.cpu_count()} cores; computing single-user references for {users} users …", flush=True)
    refs = references(users)
    one = await setup(1, users, seconds, refs)
    two = await setup(2, users, seconds, refs)
    print(
        f"\n2 replicas against 1, same proxy, same run: throughput x{two[0] / one[0]:.2f} "
        f"({two[0]:.2f} vs {one[0]:.2f} reruns/s); browser p95 {two[1]:.2f} s vs {one[1]:.2f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=90)
    args = ap.parse_args()
    asyncio.run(run(args.users, min(args.seconds, 900)))


if __name__ == "__main__":
    main()

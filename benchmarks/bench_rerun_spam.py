"""Rerun spam against a hosted server (issue 35 §4.2): how long another user waits, and how soon the server is idle.

Run:  python benchmarks/bench_rerun_spam.py [--sessions 10] [--seconds 30] [--every 0.05] [--query view=Heads]
Starts `streamlit run app.py` with MHA_VIZ_HOSTED=1 on loopback, measures a normal page alone, then opens
--sessions page streams from one address, each sending a rerun of ?--query every --every seconds for --seconds
(the issue's attack: 10 sessions, 50 ms, 30 s), while a person at another address (127.0.0.2) asks for a page
every few seconds.
When the spam ends it samples the server's CPU every 0.5 s until it stays under 10 % of a core for 3 s (idle), and
asks for one more page. Prints: the page alone, the other client's pages during the spam, the time from the spam's
end to idle (the recovery), and the page after. The issue's main: pages timed out from 40 s to 4 minutes after the
spam, the server sat at 100 % for ~9 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.stream_client import idle_after, serve, spammer, timed_page

IDLE_CPU = 10.0  # % of one core
IDLE_FOR_S = 3.0


async def attack(url: str, query: str, args: argparse.Namespace, source: str = "") -> tuple[list[float | None], int]:
    """args.sessions spammers (from ``source``) for args.seconds; the other person's page times meanwhile, and
    how many reruns were sent."""
    sent: list[int] = []
    spam = [
        asyncio.create_task(spammer(url, query, args.seconds, args.every, sent, source)) for _ in range(args.sessions)
    ]
    other: list[float | None] = []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        other.append(await timed_page(url, f"{query}&user=1", args.page_limit))
        await asyncio.sleep(2)
    await asyncio.gather(*spam)
    return other, len(sent)


def recovery_s(pid: int, limit_s: float) -> float | None:
    """Seconds from now until the server's CPU stays under IDLE_CPU % for IDLE_FOR_S (None: not within limit_s)."""
    return idle_after(pid, limit_s, IDLE_FOR_S, IDLE_CPU)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=0.05)
    parser.add_argument("--query", default="view=Heads")
    parser.add_argument("--page-limit", type=float, default=60.0)
    parser.add_argument("--idle-limit", type=float, default=600.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp), {"MHA_VIZ_HOSTED": "1"}) as server:
        asyncio.run(timed_page(server.ws_url, args.query, 300))  # warm
        alone = asyncio.run(timed_page(server.ws_url, f"{args.query}&user=0", 300))
        print(f"page alone: {alone:.2f} s")
        other, sent = asyncio.run(attack(server.ws_url, args.query, args))
        shown = ", ".join("timeout" if t is None else f"{t:.1f}" for t in other)
        print(
            f"spam: {args.sessions} sessions, {sent} reruns in {args.seconds:.0f} s; other client's pages (s): {shown}"
        )
        rec = recovery_s(server.proc.pid, args.idle_limit)
        print("recovery: " + ("not idle within limit" if rec is None else f"idle {rec:.1f} s after the spam ended"))
        after = asyncio.run(timed_page(server.ws_url, f"{args.query}&user=2", 300))
        print("page after: " + ("timeout" if after is None else f"{after:.2f} s"))
        refused = server.log_text().count("rerun")
        print(f"server log lines naming reruns: {refused}")


if __name__ == "__main__":
    main()

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

import psutil
import websockets
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.stream_client import rerun, serve

IDLE_CPU = 10.0  # % of one core
IDLE_FOR_S = 3.0


async def spammer(url: str, query: str, seconds: float, every: float, sent: list[int], source: str = "") -> None:
    """One page stream (from address ``source``, else the default) sending a rerun every ``every`` s."""
    addr = {"local_addr": (source, 0)} if source else {}
    try:
        async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60, **addr) as ws:
            reader = asyncio.create_task(_drain(ws))
            end = time.monotonic() + seconds
            k = 0
            while time.monotonic() < end:
                await ws.send(rerun(f"{query}&k={k % 7}"))  # a few distinct pages, as a spammer would vary them
                sent.append(1)
                k += 1
                await asyncio.sleep(every)
            reader.cancel()
    except (OSError, websockets.exceptions.WebSocketException):
        pass  # refused or dropped by the server


async def _drain(ws: websockets.ClientConnection) -> None:
    async for _ in ws:
        pass


async def timed_page(url: str, query: str, limit_s: float, source: str = "127.0.0.2") -> float | None:
    """Seconds until a page of another person (another address: ``source``) finished; None past limit_s."""
    start = time.monotonic()
    try:
        async with (
            asyncio.timeout(limit_s),
            websockets.connect(url, subprotocols=["streamlit"], max_size=None, local_addr=(source, 0)) as ws,
        ):
            await ws.send(rerun(query))
            while True:
                msg = ForwardMsg()
                msg.ParseFromString(await ws.recv())
                if msg.WhichOneof("type") == "script_finished":
                    return time.monotonic() - start
    except TimeoutError:
        return None


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
    proc = psutil.Process(pid)
    proc.cpu_percent(None)
    start = time.monotonic()
    quiet_since = None
    while time.monotonic() - start < limit_s:
        time.sleep(0.5)
        now = time.monotonic()
        if proc.cpu_percent(None) < IDLE_CPU:
            quiet_since = quiet_since or now - 0.5
            if now - quiet_since >= IDLE_FOR_S:
                return quiet_since - start
        else:
            quiet_since = None
    return None


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

"""Ten sessions served from one process (issue 36 §6): the server's time per action, measured with protocol-level
clients that do not draw (tests/stream_client.py's protocol), against one client alone in the same run.

Run:  python benchmarks/bench_sessions.py [--clients 10] [--solo-reps 3] [--before HEAD]
--before REV: the dashboard as committed at REV (`git archive`) is measured first, then this tree, in one run.
A real `streamlit run app.py` (MHA_VIZ_TIMINGS set), visited once it says /ready. Each client is one websocket
session, as a browser's, sending what a browser sends (rerun_script with the widget states it changed) and
reading the answers without drawing them. Its sequence, on a sentence of its own (no client reuses another's
trace): open the page (Lesson), change the layer, switch to the Step by step tab, the Look group (Heads),
change the layer there, the Explain group (Head roles). Every answer is checked: the run finished, no error on
the page, the layer asked for named on the page (its text or a figure's title), the view asked for in its link.
After one unmeasured client (the process's first pages), one client alone (--solo-reps times, one sentence each),
then --clients at once. Printed per action: the server's own time for the run (its MHA_VIZ_TIMINGS "page" line:
target p95 <= 1 s with 10 clients), the client's wait (send -> script_finished: the run plus its wait for the
others on the same cores), p50 and p95, the ten clients' p95 against the one client's median, and the server's
CPU seconds for the action of one client alone (its median, "CPU 1": ten opens at once under the GIL cost about ten
times it); the server's CPU seconds per action in each phase (all its threads: a figure a busy machine changes far
less than a wall time); the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import websockets
from harness import copy_at
from stream_client import serve
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates

ROOT = Path(__file__).resolve().parents[1]
TARGET_P95_S = 1.0
READY_TIMEOUT_S = 600
LAYER = re.compile(rb"[Ll]ayer (\d+)\b")
WORDS = ["tired", "wide", "old", "wet", "busy", "long", "new", "slow", "cold", "dark", "far", "late", "small"]
# (action, widget key, value, what the page's link then says): the key ends the widget's id ("$$ID-<hash>-<key>")
ACTIONS = (
    ("open", None, None, {}),
    ("layer (Lesson)", "layer", "2", {}),
    ("tab Step by step", "view_tab_Learn", "Step by step", {"view": "Step by step"}),
    ("group Look (Heads)", "view_group", ["Look"], {"view": "Heads"}),
    ("layer (Heads)", "layer", "4", {}),
    ("group Explain (Head roles)", "view_group", ["Explain"], {"view": "Head roles"}),
)


@dataclass
class Client:
    text: str
    session: str = ""
    query: str = ""
    layers: set[str] = field(default_factory=set)  # the layers the last answer names ("layer 2", "Layer 2, head 0")
    ids: dict[str, str] = field(default_factory=dict)  # widget key -> id, from the page's elements
    waits: list[float] = field(default_factory=list)  # seconds per action, send -> script_finished
    cpu: list[float] = field(default_factory=list)  # the server's CPU seconds per action (a client alone: pid given)
    errors: list[str] = field(default_factory=list)


def _ids(msg: ForwardMsg, client: Client) -> None:
    """Remember the widget ids and read the session id, the link and any error from one message."""
    kind = msg.WhichOneof("type")
    if kind == "new_session":
        client.session = msg.new_session.initialize.session_id
    elif kind == "page_info_changed":
        client.query = msg.page_info_changed.query_string
    elif kind == "delta" and msg.delta.WhichOneof("type") in ("new_element", "add_block"):
        part = msg.delta.new_element if msg.delta.WhichOneof("type") == "new_element" else msg.delta.add_block
        what = part.WhichOneof("type")
        sub = getattr(part, what) if what else None
        wid = getattr(sub, "id", "") if sub is not None else ""
        if wid.startswith("$$ID-"):
            client.ids[wid.rsplit("-", 1)[1]] = wid
        if what == "exception":
            client.errors.append(f"{sub.type}: {sub.message}")
        elif what == "alert" and sub.format == sub.ERROR:
            client.errors.append(sub.body)


def _rerun(client: Client, key: str | None, value: object) -> bytes:
    states = []
    if key is not None:
        state = WidgetState(id=client.ids[key])
        if isinstance(value, list):
            state.string_array_value.data.extend(value)
        else:
            state.string_value = str(value)
        states.append(state)
    msg = BackMsg()
    msg.rerun_script.CopyFrom(ClientState(query_string=client.query, widget_states=WidgetStates(widgets=states)))
    return msg.SerializeToString()


async def run_client(url: str, client: Client, pid: int | None = None) -> Client:
    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=120) as ws:
        client.query = urllib.parse.urlencode({"text": client.text})
        for name, key, value, expect in ACTIONS:
            client.layers.clear()
            cpu0 = _cpu_s(pid) if pid is not None else 0.0
            t0 = time.perf_counter()
            await ws.send(_rerun(client, key, value))
            async with asyncio.timeout(READY_TIMEOUT_S):
                while True:
                    data = await ws.recv()
                    client.layers.update(x.decode() for x in LAYER.findall(data))  # bytes: no parse of a figure
                    msg = ForwardMsg()
                    msg.ParseFromString(data)
                    _ids(msg, client)
                    if msg.WhichOneof("type") == "script_finished":
                        break
            client.waits.append(time.perf_counter() - t0)
            if pid is not None:
                client.cpu.append(_cpu_s(pid) - cpu0)
            shown = dict(urllib.parse.parse_qsl(client.query))
            wrong = {k: shown.get(k) for k, v in expect.items() if shown.get(k) != v}
            if wrong:
                client.errors.append(f"{name}: the page's link says {wrong}, not {expect}")
            if key == "layer":
                if value not in client.layers:
                    client.errors.append(f"{name}: the page names layers {sorted(client.layers)}, not {value}")
                client.query += f"&layer={value}"  # a bound widget: the browser writes its value in the link
    return client


async def _many(url: str, clients: list[Client]) -> list[Client]:
    return list(await asyncio.gather(*(run_client(url, c) for c in clients)))


def _server_times(path: Path, clients: list[Client]) -> list[list[float]]:
    """Each client's page runs, in order (the MHA_VIZ_TIMINGS lines of its session)."""
    lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    out = []
    for c in clients:
        mine = sorted(
            (r for r in lines if r["kind"] == "page" and r["session"] == c.session[:8]), key=lambda r: r["at"]
        )
        if len(mine) != len(ACTIONS):
            c.errors.append(f"{len(mine)} page runs for {len(ACTIONS)} actions")
        out.append([r["s"] for r in mine])
    return out


def _p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20, method="inclusive")[18] if len(xs) > 1 else xs[0]


def _wait_ready(port: int) -> None:
    from mha_viz.serve.ready import probe  # light: no torch

    deadline, answer = time.monotonic() + READY_TIMEOUT_S, ""
    while time.monotonic() < deadline:
        try:
            ok, answer = probe(f"http://127.0.0.1:{port}")
        except OSError as e:  # (serve.ready.probe reads a 503's body without catching its timeout: busy machine)
            ok, answer = False, str(e)
        if ok:
            return
        if "could not" in answer:  # the preload failed: it will never be ready
            break
        time.sleep(0.3)
    raise RuntimeError(f"the server did not say /ready: {answer}")


def _cpu_s(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--solo-reps", type=int, default=3)
    ap.add_argument("--before", metavar="REV", help="first the dashboard as committed at REV (e.g. HEAD)")
    args = ap.parse_args()
    if args.before:
        print(f"== before: the dashboard as committed at {args.before}")
        measure(args, copy_at(args.before))
        print("== this tree")
    measure(args, ROOT)


def measure(args: argparse.Namespace, root: Path) -> None:
    """The whole measurement against `streamlit run app.py` in ``root``."""
    tmp = Path(tempfile.mkdtemp(prefix="mha-viz-sessions-"))
    timings = tmp / "timings.jsonl"
    env = {"MHA_VIZ_TIMINGS": str(timings)}
    say = lambda i: f"Client {i} says the animal didn't cross the street because it was too {WORDS[i % len(WORDS)]}"
    print(f"load average before: {_loadavg()}")
    with serve(tmp, env=env, root=root) as server:
        _wait_ready(server.port)
        warm = asyncio.run(_many(server.ws_url, [Client(say(99))]))  # the first page of the process: not counted
        cpu = [_cpu_s(server.proc.pid)]  # the server's CPU seconds (every thread) around each phase
        solo = [
            asyncio.run(run_client(server.ws_url, Client(say(100 + i)), server.proc.pid)) for i in range(args.solo_reps)
        ]
        cpu.append(_cpu_s(server.proc.pid))
        many = asyncio.run(_many(server.ws_url, [Client(say(i)) for i in range(args.clients)]))
        cpu.append(_cpu_s(server.proc.pid))
        rss = server.rss_mb()
    print(f"load average after:  {_loadavg()}; server memory {rss:.0f} MB")
    solo_s, many_s = _server_times(timings, solo), _server_times(timings, many)
    _server_times(timings, warm)
    errors = [f"{c.text[:9]}: {e}" for c in warm + solo + many for e in c.errors]
    print(f"1 client alone ({args.solo_reps} reps) against {args.clients} clients at once, seconds per action:")
    print(f"  {'action':28s} {'server 1: p50':>13s} {'server N: p50   p95':>20s} {'p95/1':>6s}   "
          f"{'wait 1: p50':>11s} {'wait N: p50   p95':>18s} {'CPU 1':>6s}")  # fmt: skip
    for i, (name, *_rest) in enumerate(ACTIONS):
        s1 = [t[i] for t in solo_s if len(t) > i]
        sn = [t[i] for t in many_s if len(t) > i]
        w1 = [c.waits[i] for c in solo if len(c.waits) > i]
        wn = [c.waits[i] for c in many if len(c.waits) > i]
        if not (s1 and sn and w1 and wn):
            print(f"  {name:28s} (missing: see the errors)")
            continue
        one, cpu1 = statistics.median(s1), statistics.median(c.cpu[i] for c in solo if len(c.cpu) > i)
        print(f"  {name:28s} {one:13.3f} {statistics.median(sn):10.3f} {_p95(sn):8.3f} {_p95(sn) / one:6.1f}   "
              f"{statistics.median(w1):11.3f} {statistics.median(wn):9.3f} {_p95(wn):8.3f} {cpu1:6.3f}")  # fmt: skip
    all_n = [x for t in many_s for x in t]
    all_1 = [x for t in solo_s for x in t]
    if all_n and all_1:
        p95, p95_1 = _p95(all_n), _p95(all_1)
        verdict = "ok" if p95 <= TARGET_P95_S else "MISSED"
        print(f"every action: server time p50 {statistics.median(all_n):.3f} s, p95 {p95:.3f} s with {args.clients} "
              f"clients (target p95 <= {TARGET_P95_S:.0f} s: {verdict}); 1 client alone: p50 "
              f"{statistics.median(all_1):.3f} s, p95 {p95_1:.3f} s; ratio of the p95s {p95 / p95_1:.1f}")  # fmt: skip
    per = [
        (b - a) / (n * len(ACTIONS)) for a, b, n in ((cpu[0], cpu[1], args.solo_reps), (cpu[1], cpu[2], args.clients))
    ]
    print(f"the server's CPU per action (every thread; unlike wall times, about the same on a busy machine): "
          f"1 client {per[0]:.3f} s, {args.clients} clients {per[1]:.3f} s; {args.clients} clients' one action each "
          f"= {args.clients * per[1]:.2f} CPU s")  # fmt: skip
    print(f"errors: {len(errors)}")
    for e in errors[:20]:
        print(f"  {e}")


if __name__ == "__main__":
    main()

"""The views at length through a real server (issue 38 §3): SmolLM2 over 8,192 tokens of the GPL-3, recorded once,
then each view's server time and payload, against a bare Streamlit page's redraw measured in the same run.

Run:  python benchmarks/bench_long_views.py [--tokens 8192] [--layer 21] [--url ws://127.0.0.1:PORT/_stcore/stream]
Starts `streamlit run app.py` (MHA_VIZ_MAX_REQUEST_MB=8192 unless set) and a server of benchmarks/floor_app.py, or
uses the app server at --url (a text it already recorded is not recorded again). Each page run is a raw websocket
client (tests/stream_client.py: what a browser sends): the time from the rerun sent to script_finished, and the bytes
the server sent (every ForwardMsg: the page's payload). The zoom is the slider's change sent as that page's widget
state inside the opened head's fragment (what the browser sends when the range moves). After the recording, the
time until every layer's pooled maps are ready (computed ahead in the server: ui/pool_ahead.py; its log line), then
another layer's Heads and the Overview (their maps computed ahead: cache hits). Targets: any view <= 2 s and
<= 15 MB; a zoom <= 2 s. Prints a table; the first run (the recording) is printed apart.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
GPL = Path("/usr/share/common-licenses/GPL-3")
SMOL = "SmolLM2-135M (bundled)"
MB = 1e6


def gpl_text(n_tokens: int) -> str:
    """The GPL-3, its start again after it, cut to ``n_tokens`` SmolLM2 tokens."""
    from transformers import AutoTokenizer

    from mha_viz.models.sources import smollm2_dir

    tok = AutoTokenizer.from_pretrained(smollm2_dir())
    body = GPL.read_text()
    ids = tok(body + "\n\n" + body, add_special_tokens=True)["input_ids"][:n_tokens]
    return tok.decode(ids)


LOGGED = (
    "import logging, sys; from streamlit.web.cli import main; log = logging.getLogger('mha_viz'); "
    "log.setLevel(logging.INFO); log.addHandler(logging.StreamHandler()); sys.argv[0] = 'streamlit'; main()"
)
# streamlit run, with mha_viz's INFO lines in the server's log (pipeline/pool_ahead.py: when the maps ahead are ready)


def ahead_ready(log: Path, timeout: float) -> str:
    """Waits for the server's line that every layer's pooled maps are ready (computed ahead); returns it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if "pooled maps ahead" in ln]
        if lines:
            return lines[-1].strip()
        time.sleep(0.5)
    return f"not ready after {timeout:.0f} s"


def serve(app: str, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    from stream_client import _free_port, _healthy

    port = _free_port()
    cmd = [sys.executable, "-c", LOGGED, "run", app, "--server.headless", "true", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # fmt: skip
    log = open(f"/tmp/bench_long_views_{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while not _healthy(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"server did not start: see {log.name}")
        time.sleep(0.3)
    return proc, port


async def session(url: str, query: str, timeout: float = 1800) -> tuple[object, list[dict]]:
    """A page stream with one run of ``?query`` done: (the socket, what each run gave)."""
    import websockets

    ws = await websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60)
    return ws, [await one_run(ws, query, timeout=timeout)]


async def one_run(ws: object, query: str, widgets: object = None, fragment: str = "", timeout: float = 1800) -> dict:
    """Send a rerun (``widgets``: WidgetStates; ``fragment``: that fragment alone) and read until it finishes."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ClientState_pb2 import ClientState

    msg = BackMsg()
    state = ClientState(query_string=query, fragment_id=fragment)
    if widgets is not None:
        state.widget_states.CopyFrom(widgets)
    msg.rerun_script.CopyFrom(state)
    await ws.send(msg.SerializeToString())
    return await read_run(ws, timeout)


async def read_run(ws: object, timeout: float = 1800) -> dict:
    """Reads one page run's messages until its script_finished: its time from now, bytes, errors and sliders;
    ``rerun``: the script asked for a rerun (st.rerun: the server runs the page again by itself, read_run again)."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    out = {"bytes": 0, "errors": [], "sliders": {}, "seconds": 0.0, "rerun": False}
    start = time.perf_counter()
    async with asyncio.timeout(timeout):
        while True:
            data = await ws.recv()
            out["bytes"] += len(data)
            fm = ForwardMsg()
            fm.ParseFromString(data)
            kind = fm.WhichOneof("type")
            if kind == "script_finished":
                out["seconds"] = time.perf_counter() - start
                out["rerun"] = fm.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN
                return out
            if kind != "delta" or fm.delta.WhichOneof("type") != "new_element":
                continue
            el = fm.delta.new_element
            what = el.WhichOneof("type")
            if what == "exception" or (what == "alert" and el.alert.format == el.alert.ERROR):
                out["errors"].append(str(el.exception.message if what == "exception" else el.alert.body)[:200])
            elif what == "slider":
                out["sliders"][el.slider.label] = (el.slider.id, fm.delta.fragment_id, list(el.slider.default))


def zoom_state(slider_id: str, lo: int, hi: int) -> object:
    from streamlit.proto.Common_pb2 import DoubleArray
    from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates

    ws = WidgetStates()
    ws.widgets.append(WidgetState(id=slider_id, double_array_value=DoubleArray(data=[lo, hi])))
    return ws


def spy(pid: int, out: str, seconds: float, settle: float = 1.5) -> subprocess.Popen:
    """py-spy (in the venv) sampling the server ``pid`` for ``seconds``, every thread, collapsed stacks to ``out``."""
    spy_bin = Path(sys.executable).with_name("py-spy")
    cmd = [str(spy_bin), "record", "--pid", str(pid), "--threads", "--idle", "--format", "raw", "--rate", "50",
           "--duration", str(int(seconds)), "--output", out]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(settle)  # attached before the run starts
    return proc


async def measure(
    url: str, floor_url: str, text: str, layer: int, log: Path | None, profile: tuple[int, str] | None = None
) -> list[tuple[str, dict]]:
    def q(**kw: str) -> str:
        return urllib.parse.urlencode({"src": SMOL, "text": text, **kw})

    rows: list[tuple[str, dict]] = []
    ws, first = await session(floor_url, "")  # the floor: a bare page's redraw (its second run)
    rows.append(("floor: bare Streamlit page, rerun", await one_run(ws, "")))
    await ws.close()
    t0 = time.perf_counter()
    ws, first = await session(url, q(view="Heads", layer=str(layer), head="0"))
    print(f"first Heads run (records the text if needed): {time.perf_counter() - t0:.1f} s, "
          f"errors {first[0]['errors']}", flush=True)  # fmt: skip
    t_end = time.perf_counter()  # the recording's end
    if first[0]["rerun"]:  # the recording ends in st.rerun: the server runs the page again by itself (a browser's
        spied = None if profile is None else spy(*profile, 30, settle=0.0)  # next page; it starts the maps ahead)
        after = await read_run(ws)
        rows.append((f"Heads, layer {layer}: the page after the recording (its own rerun)", after))
        if spied is not None:
            await asyncio.to_thread(spied.wait)
            print(f"py-spy: the page after the recording, 30 s from its start, in {profile[1]}", flush=True)
    if log is not None:  # the maps ahead start from the shown layer outwards: the farthest layer is reached last
        far = 0 if layer >= 15 else 29
        got = await one_run(ws, q(view="Heads", layer=str(far), head="0"))
        rows.append((f"Heads, layer {far} (first draw, before the maps ahead reach it)", got))
        rows.append((f"Heads, layer {far} (again)", await one_run(ws, q(view="Heads", layer=str(far), head="0"))))
        line = await asyncio.to_thread(ahead_ready, log, 1800)  # the websocket keeps answering pings meanwhile
        print(f"from the recording's end until every layer's maps are ready: {time.perf_counter() - t_end:.1f} s "
              f"(server: {line})", flush=True)  # fmt: skip
    again = await one_run(ws, q(view="Heads", layer=str(layer), head="0"))
    rows.append((f"Heads, layer {layer} (grid, opened head, zoom, focus row)", again))
    sliders = again["sliders"]  # this run's fragment: each full run makes it anew
    rows_id = next((v for k, v in sliders.items() if k.startswith("Zoom: query rows")), None)
    keys_id = next((v for k, v in sliders.items() if k.startswith("Zoom: key columns")), None)
    if rows_id and keys_id:
        both = zoom_state(rows_id[0], 6000, 6063)
        both.widgets.append(zoom_state(keys_id[0], 6000, 6063).widgets[0])
        try:
            got = await one_run(ws, q(view="Heads", layer=str(layer), head="0"), both, rows_id[1], timeout=120)
            rows.append(("zoom to queries 6,000-6,063 × keys 6,000-6,063 (its fragment)", got))
        except TimeoutError:  # the fragment was not found: the same change as a whole page's rerun
            ws = (await session(url, q(view="Heads", layer=str(layer), head="0")))[0]
            got = await one_run(ws, q(view="Heads", layer=str(layer), head="0"), both)
            rows.append(("zoom to queries 6,000-6,063 × keys 6,000-6,063 (whole page)", got))
    await ws.close()
    for name, query in [
        (f"Heads, layer {layer - 1} (another layer)", q(view="Heads", layer=str(layer - 1), head="0")),
        ("Overview (30 layers × 9 heads, pooled)", q(view="Overview")),
    ]:
        ws, got = await session(url, query)
        rows.append((name + " (first draw)", got[0]))
        rows.append((name + " (again)", await one_run(ws, query)))
        await ws.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--layer", type=int, default=21)
    ap.add_argument("--url", default="")
    ap.add_argument("--profile", default="", help="py-spy's collapsed stacks of the run after the recording")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped: the servers it started are stopped too
    text = gpl_text(args.tokens)
    procs = []
    log = None  # the server's log (a server started here): when the maps ahead are ready
    try:
        url = args.url
        if not url:
            proc, port = serve("app.py", {"MHA_VIZ_MAX_REQUEST_MB": os.environ.get("MHA_VIZ_MAX_REQUEST_MB", "8192")})
            procs.append(proc)
            url = f"ws://127.0.0.1:{port}/_stcore/stream"
            log = Path(f"/tmp/bench_long_views_{port}.log")
        fproc, fport = serve("benchmarks/floor_app.py", {})
        procs.append(fproc)
        profile = (procs[0].pid, args.profile) if args.profile and not args.url else None
        rows = asyncio.run(measure(url, f"ws://127.0.0.1:{fport}/_stcore/stream", text, args.layer, log, profile))
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
    floor = rows[0][1]["seconds"]
    print(f"\nSmolLM2, {args.tokens:,} tokens of the GPL-3, load average {os.getloadavg()[0]:.1f} (2 cores)")
    print(f"{'view':<66} {'server s':>9} {'× floor':>8} {'MB':>7}  target  errors")
    for name, r in rows:
        ok = r["seconds"] <= 2.0 and r["bytes"] / MB <= 15
        print(f"{name:<66} {r['seconds']:9.2f} {r['seconds'] / floor:8.1f} {r['bytes'] / MB:7.2f}  "
              f"{'met' if ok else 'MISSED':>6}  {'; '.join(r['errors']) or '-'}")  # fmt: skip
    names = [name for name, _ in rows]
    for slow, fast in [("the page after the recording", "(grid, opened head"), ("before the maps ahead", "(again)")]:
        a = next((i for i, n in enumerate(names) if slow in n), None)
        b = next((i for i, n in enumerate(names) if fast in n and a is not None and i > a), None)
        if a is not None and b is not None:  # a second floor: the same page once all it reads is cached
            sa, sb = rows[a][1]["seconds"], rows[b][1]["seconds"]
            print(f"{names[a]}: {sa:.2f} s = {sa / sb:.1f}× the same page cached ({names[b]}: {sb:.2f} s)")


if __name__ == "__main__":
    main()

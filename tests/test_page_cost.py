"""What every page run pays, made cheaper for ten sessions at once (issue 36 §6; benchmarks/bench_sessions.py).

ui.memo.collect_garbage: a full collection walks every cached figure and table (~0.1 s of the GIL with the caches
full, before each of ten sessions' pages), so it runs only once the process grew GC_GROWTH_MB since the last one; a
run that left cycles holding that much memory is collected before the next. ui.memo.nbytes sizes each figure a cache
keeps: numbers skipped at once, the same string or array counted once. A page whose model is loaded and whose text
is recorded shows no spinner but the view's (each st.spinner is a thread and a message), and the empty chart that
makes a browser fetch Plotly's code is sent as it is built, unchecked."""

from __future__ import annotations

import asyncio
import gc
import json
import time
import weakref
from pathlib import Path

import numpy as np
import websockets
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from mha_viz.config import GC_GROWTH_MB
from mha_viz.figures.finish import finish
from mha_viz.figures.heatmap import matrix_spec
from mha_viz.serve.ready import probe
from mha_viz.ui import memo
from tests.stream_client import rerun, run_async, serve


class _Cycle:
    """Garbage only a collection frees: an object that refers to itself, around an array of ``mb`` MB."""

    def __init__(self, mb: int) -> None:
        self.me = self
        self.array = np.ones(mb * 2**20 // 8)  # float64, written: its pages are resident


def _memory(monkeypatch) -> list[int]:
    """The process's memory as collect_garbage reads it, set by the test (MB): the real one moves with whatever
    else the worker runs (a model loading in a thread an earlier test started), which made these tests flaky.
    No dropped model is pending (one an earlier test left alive failed both tests in CI)."""
    mb = [1000]
    monkeypatch.setattr(memo, "_rss_bytes", lambda: mb[0] * 2**20)
    # A model an earlier test of the worker dropped and still holds makes every run collect the whole heap
    # (memo.release_dropped): that rule has its own test (test_server_hardening); here none is pending.
    monkeypatch.setattr(memo, "_DROPPED", [])
    return mb


def test_a_collection_only_once_memory_grew(monkeypatch) -> None:
    mb = _memory(monkeypatch)
    was_frozen, was_enabled = memo._frozen, gc.isenabled()
    gc.disable()  # Python's own collections would free the cycles below at random
    try:
        memo.freeze_heap()
        memo._collected_rss = 0  # an earlier test's low point must not count: the baseline call below collects
        memo.collect_garbage()  # the baseline: 1000 MB
        small = _Cycle(1)
        small_ref = weakref.ref(small)
        del small
        mb[0] += 1
        memo.collect_garbage()  # 1 MB grown: not worth walking the heap for
        assert small_ref() is not None
        big = _Cycle(1)
        big_ref = weakref.ref(big)
        del big
        mb[0] += GC_GROWTH_MB
        memo.collect_garbage()  # the process grew past GC_GROWTH_MB: collected, the small cycle with it
        assert big_ref() is None and small_ref() is None
    finally:
        gc.unfreeze()
        memo._frozen = was_frozen
        if was_enabled:
            gc.enable()


def test_growth_counts_from_the_lowest_memory_since(monkeypatch) -> None:
    """A big run's arrays handed back after a collection: garbage that grows the process again by GC_GROWTH_MB is
    collected, although the process never gets back above what it held at that collection."""
    mb = _memory(monkeypatch)
    was_frozen, was_enabled = memo._frozen, gc.isenabled()
    gc.disable()
    try:
        memo.freeze_heap()
        memo._collected_rss = 0
        mb[0] = 1000 + 2 * GC_GROWTH_MB + 64  # a big run's arrays, alive at the collection
        memo.collect_garbage()
        mb[0] = 1000  # handed back to the system
        memo.collect_garbage()  # smaller than at the collection: nothing to do
        cycle = _Cycle(1)
        ref = weakref.ref(cycle)
        del cycle
        memo.collect_garbage()
        assert ref() is not None  # not grown since the lowest point
        mb[0] += GC_GROWTH_MB + 16
        memo.collect_garbage()
        assert ref() is None
    finally:
        gc.unfreeze()
        memo._frozen = was_frozen
        if was_enabled:
            gc.enable()


def test_a_figure_is_sized_by_its_strings_and_arrays_once() -> None:
    """nbytes of a finished heatmap = the characters of its distinct strings (labels, the typed arrays' base64,
    names) and the bytes of its arrays, counted here by an independent walk."""
    labels = tuple(f"token{i}" for i in range(12))
    fig = finish(matrix_spec(np.random.default_rng(0).random((12, 12)), labels, labels, "Head 0", attention=True))
    seen: set[int] = set()

    def walk(v: object) -> int:
        if id(v) in seen or isinstance(v, bool | int | float) or v is None:
            return 0
        seen.add(id(v))
        if isinstance(v, str | bytes):
            return len(v)
        if isinstance(v, np.ndarray):
            return v.nbytes
        items = v.items() if isinstance(v, dict) else ((x, None) for x in v)
        return sum(walk(a) + walk(b) for a, b in items)

    assert memo.nbytes(fig) == walk(fig) > 12 * 12 * 4  # the weights (float32 in base64) at least
    doubled = {"a": fig, "b": fig, "n": [1, 2.5, None, True]}
    assert memo.nbytes(doubled) == memo.nbytes(fig) + 2  # the same figure once, the numbers nothing


async def _sent(url: str, query: str) -> tuple[list[str], list[dict], list[str]]:
    """One session's first page: the transient deltas (spinners), each chart's spec, and the errors shown."""
    transients, charts, errors = [], [], []
    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60) as ws:
        await ws.send(rerun(query))
        async with asyncio.timeout(300):
            while True:
                msg = ForwardMsg()
                msg.ParseFromString(await ws.recv())
                if msg.WhichOneof("type") == "script_finished":
                    return transients, charts, errors
                if msg.WhichOneof("type") != "delta":
                    continue
                if msg.delta.WhichOneof("type") == "new_transient":
                    transients.append(str(msg.delta.new_transient))
                element = msg.delta.new_element
                if msg.delta.WhichOneof("type") == "new_element" and element.WhichOneof("type") == "plotly_chart":
                    charts.append(json.loads(element.plotly_chart.spec))
                elif msg.delta.WhichOneof("type") == "new_element" and element.WhichOneof("type") == "alert":
                    errors += [element.alert.body] if element.alert.format == element.alert.ERROR else []


def test_a_recorded_text_opens_with_the_views_spinner_alone(tmp_path: Path) -> None:
    query = "text=the+cat+sat+on+the+mat+because+it+was+warm"
    with serve(tmp_path) as server:
        deadline = time.monotonic() + 300
        while not probe(f"http://127.0.0.1:{server.port}")[0]:  # the bundled model loaded
            assert time.monotonic() < deadline, "the server never said /ready"
            time.sleep(0.2)
        run_async(_sent(server.ws_url, query))  # the text's pass recorded
        transients, charts, errors = run_async(_sent(server.ws_url, query))  # a second visitor
    assert not errors
    assert len(transients) == 1  # the Lesson's "Computing…": not the model's loading nor the recorded pass's
    assert charts[0]["layout"]["width"] == 10 and charts[0]["data"][0]["type"] == "scatter"  # the preload chart
    assert len(charts) >= 2 and "z" in json.dumps(charts[1]["data"])  # then the lesson's heatmaps

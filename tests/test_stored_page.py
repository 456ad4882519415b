"""The server's stored first page (issue 36 §6; mha_viz/serve/page_store.py, light.py, record.py): a cold server's
first visitor gets the default page's first map drawn from a recording made by the preload from the live model,
before torch is imported, and the live page replaces it in the same run. Checked on real servers with a
protocol-level client (tests/stream_client.py), in fresh processes (what the light path imports), and in-process
against the live MiniLM (the preload's check)."""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mha_viz.serve import light, page_store, record
from mha_viz.serve import start as server_start
from tests.stream_client import first_run, run_async, serve

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 300


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.HTTPError, OSError):
        return False


def _wait(what: object, why: str, server: object) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not what():
        assert time.monotonic() < deadline, f"{why}: {server.log_text()[-3000:]}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """app.py, .streamlit and mha_viz copied once: the servers here run this copy, so the key's digest of the code
    stays the same between them while files of the working tree change (the key then differs, rightly)."""
    dest = tmp_path_factory.mktemp("tree")
    shutil.copy2(ROOT / "app.py", dest / "app.py")
    shutil.copytree(ROOT / ".streamlit", dest / ".streamlit")
    shutil.copytree(ROOT / "mha_viz", dest / "mha_viz", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _env(tree: Path, store: Path, timings: Path) -> dict[str, str]:
    return {page_store.ENV: str(store), "MHA_VIZ_TIMINGS": str(timings), server_start.OFF: "0", "PYTHONPATH": str(tree)}


@pytest.fixture(scope="module")
def stored(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store written by a real server's preload (no visitor): the folder, once /ready said ok and the files
    were there."""
    tmp = tmp_path_factory.mktemp("store")
    store = tmp / "first-page"
    with serve(tmp, _env(tree, store, tmp / "t.jsonl"), root=tree) as server:
        _wait(lambda: (store / page_store.META).is_file() and _ok(f"http://127.0.0.1:{server.port}/ready"),
              "the preload stored no first page", server)  # fmt: skip
        assert "first page" not in server.log_text(), server.log_text()[-3000:]  # no warning about it
    return store


async def _first_run(ws_url: str) -> list[tuple[float, tuple[int, ...], str, object]]:
    """A first visit's page run, sent at once: every block or element as (unix time, delta path, kind, element)."""
    seen = []
    for at, path, delta in await first_run(ws_url):
        if delta.WhichOneof("type") == "add_block":
            seen.append((at, path, "block", None))
        elif delta.WhichOneof("type") == "new_element":
            seen.append((at, path, delta.new_element.WhichOneof("type"), delta.new_element))
    return seen


def _final(seen: list) -> dict[tuple[int, ...], tuple[str, object]]:
    """The page as the browser holds it after the run: a delta at a path replaces what was there and below it."""
    tree: dict[tuple[int, ...], tuple[str, object]] = {}
    for _, path, kind, element in seen:
        for p in [p for p in tree if p[: len(path)] == path]:
            del tree[p]
        tree[path] = (kind, element)
    return tree


def _charts(items: Iterator) -> list[tuple[str, dict]]:
    """(chart id, spec) of every plotly chart with a spec among (kind, element) pairs."""
    return [(e.plotly_chart.id, json.loads(e.plotly_chart.spec)) for kind, e in items
            if kind == "plotly_chart" and e.plotly_chart.spec]  # fmt: skip


def _typed(spec: dict | list) -> np.ndarray:
    """A figure's array as plotly.js reads it: a typed-array spec ({dtype, bdata, shape}) or a plain list."""
    if isinstance(spec, list):
        return np.asarray(spec, dtype=np.float32)
    shape = tuple(int(n) for n in str(spec["shape"]).split(","))
    return np.frombuffer(base64.b64decode(spec["bdata"]), dtype=np.dtype(spec["dtype"])).reshape(shape)


def _preload(timings: Path) -> dict:
    lines = [json.loads(x) for x in timings.read_text().splitlines()]
    return next(x for x in lines if x["kind"] == "preload")


def test_a_cold_servers_first_page_is_the_stored_page_then_the_live_one(
    tree: Path, stored: Path, tmp_path: Path
) -> None:
    """The first chart comes before the preload's imports end and is the stored map; it equals the live page's map
    (data and layout) drawn later in the same run; when the run ends no stored chart is left, the live map is; the
    preload's check found the store right (it is still there, nothing logged)."""
    timings = tmp_path / "t.jsonl"
    with serve(tmp_path, _env(tree, stored, timings), root=tree) as server:
        seen = run_async(_first_run(server.ws_url))
        _wait(lambda: _ok(f"http://127.0.0.1:{server.port}/ready"), "not ready", server)
        _wait(timings.exists, "no timing line", server)
        log = server.log_text()
    errors = [
        str(e)[:300] for _, _, kind, e in seen if kind == "exception" or (kind == "alert" and e.alert.format == 1)
    ]
    assert not errors, errors
    charts = [(t, e) for t, _, kind, e in seen if kind == "plotly_chart" and e.plotly_chart.spec]
    first_at, first = charts[0]
    assert first.plotly_chart.id.endswith(light.KEY), first.plotly_chart.id
    preload = _preload(timings)
    assert first_at < preload["at"] - preload["s"], "the stored page came after the preload's imports"
    live = [(i, spec) for i, spec in _charts((k, e) for _, _, k, e in seen) if i.endswith("lesson_first")]
    assert len(live) == 1, [i for i, _ in _charts((k, e) for _, _, k, e in seen)]
    light_spec = json.loads(first.plotly_chart.spec)
    assert light_spec["data"] == live[0][1]["data"]
    assert light_spec["layout"] == live[0][1]["layout"]
    assert light_spec["data"][0]["type"] == "heatmap"
    left = _charts(_final(seen).values())
    assert not [i for i, _ in left if i.endswith(light.KEY)], "the stored map is still on the page"
    notes = [path for _, path, kind, e in seen if kind == "markdown" and e.markdown.body == light.SIDEBAR_NOTE]
    assert notes and notes[0][0] == 1, notes  # the stored page had its sidebar (root 1) from the start ...
    final = _final(seen)
    assert not [p for p, (k, e) in final.items() if k == "markdown" and e.markdown.body == light.SIDEBAR_NOTE]
    assert [p for p, (k, e) in final.items() if p[0] == 1 and k == "radio"], "the live sidebar has no model picker"
    assert [i for i, _ in left if i.endswith("lesson_first")], "the live map is not on the page"
    assert (stored / page_store.NPZ).is_file() and (stored / page_store.META).is_file()
    assert "first page" not in log, log[-3000:]


def test_a_linked_page_is_never_the_stored_page(tree: Path, stored: Path, tmp_path: Path) -> None:
    """A visitor with a link (?layer=2) waits for the live page: no stored chart is sent."""

    async def linked(ws_url: str) -> list[str]:
        return [
            d.new_element.plotly_chart.id
            for _, _, d in await first_run(ws_url, "layer=2")
            if d.WhichOneof("type") == "new_element" and d.new_element.WhichOneof("type") == "plotly_chart"
        ]

    with serve(tmp_path, _env(tree, stored, tmp_path / "t.jsonl"), root=tree) as server:
        ids = run_async(linked(server.ws_url))
    assert ids and not [i for i in ids if i.endswith(light.KEY)], ids
    assert [i for i in ids if i.endswith("lesson_first")], ids


# --- the light path in a fresh process: what it imports, when it draws -----------------------------------------------
LIGHT_APP = """
import streamlit as st
from mha_viz.serve import light
slot = light.first_page()
st.write("stored page drawn" if slot is not None else "nothing drawn")
"""
RUN_LIGHT = """
import json, sys
from streamlit.testing.v1 import AppTest
before = sorted(m for m in ("torch", "transformers", "mha_viz.ui") if m in sys.modules)
at = AppTest.from_string(sys.argv[1], default_timeout=120)
if sys.argv[2]:
    at.query_params["layer"] = sys.argv[2]
at.run()
charts = [e.proto.spec for e in at.get("plotly_chart")]
print(json.dumps({"before": before, "heavy": sorted(m for m in ("torch", "transformers", "mha_viz.ui") if m in
                  sys.modules), "said": [m.value for m in at.markdown], "charts": charts,
                  "errors": [str(e.value) for e in at.exception]}))
"""


def _light_run(tree: Path, store: Path, query: str = "") -> dict:
    env = {**os.environ, page_store.ENV: str(store), "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", RUN_LIGHT, LIGHT_APP, query], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"log": done.stderr}


def test_the_light_path_draws_the_stored_map_without_torch(tree: Path, stored: Path) -> None:
    """In a fresh process, the stored page is drawn (its map a heatmap of the stored matrix) and neither torch nor
    transformers nor the dashboard is imported; a link (?layer=2) draws nothing."""
    out = _light_run(tree, stored)
    assert not out["errors"], out["errors"]
    assert "stored page drawn" in out["said"], out
    assert out["heavy"] == [], out["heavy"]
    (spec,) = out["charts"]
    data = json.loads(spec)["data"][0]
    assert data["type"] == "heatmap"
    assert np.array_equal(_typed(data["z"]), page_store.read(stored).matrix)  # the stored float32 values, drawn
    linked = _light_run(tree, stored, "2")
    assert "nothing drawn" in linked["said"] and not linked["charts"], linked


def test_a_tampered_store_is_not_drawn_and_is_logged(tree: Path, stored: Path, tmp_path: Path) -> None:
    """The same light path with one byte of the stored .npz changed: nothing drawn, and the log says why."""
    bad = tmp_path / "first-page"
    shutil.copytree(stored, bad)
    data = bytearray((bad / page_store.NPZ).read_bytes())
    data[-40] ^= 0x01
    (bad / page_store.NPZ).write_bytes(bytes(data))
    out = _light_run(tree, bad)
    assert "nothing drawn" in out["said"] and not out["charts"], out
    assert "is not used: its .npz is not the one its .json was written with" in out["log"], out["log"][-2000:]


# --- the store itself and the preload's check, in this process -----------------------------------------------------
def _here(stored: Path, where: Path) -> Path:
    """The fixture's recording with this process's own key (its code is the working tree, not the copy): usable
    here, so each test below first sees it drawn, then not once it is changed."""
    rec = page_store.read(stored)
    key = {**rec.key, **json.loads(json.dumps(page_store.light_key(Path(rec.key["model_file"]))))}
    assert page_store.write(where, key, rec.page, rec.matrix)
    assert page_store.usable(where) is not None
    return where


@pytest.fixture
def fresh() -> Iterator[None]:
    """page_store.REJECTED as a fresh process has it, before and after the test."""
    page_store.REJECTED.clear()
    yield
    page_store.REJECTED.clear()


class Unpickled:
    """An object whose unpickling writes a file: if the store ever unpickled, the file would be there."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.write_text, (self.marker, "unpickled"))


def test_no_pickle_is_ever_read(stored: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh: None) -> None:
    """An .npz whose matrix is a pickled object array, with the .json's hash of it right: not used, logged, and the
    pickle never runs (allow_pickle=False)."""
    where = _here(stored, tmp_path / "store")
    marker = tmp_path / "marker"
    evil = np.empty(1, dtype=object)
    evil[0] = Unpickled(marker)
    np.savez(where / page_store.NPZ, matrix=evil, allow_pickle=True)
    meta = json.loads((where / page_store.META).read_text())
    meta["npz_sha256"] = page_store.sha256_file(where / page_store.NPZ)
    (where / page_store.META).write_text(json.dumps(meta))
    pickle.loads(pickle.dumps(Unpickled(tmp_path / "control")))  # the object does write when unpickled
    assert (tmp_path / "control").exists()
    with caplog.at_level(logging.WARNING, logger=page_store.log.name):
        assert page_store.usable(where) is None
    assert not marker.exists()
    assert "is not used: Object arrays cannot be loaded when allow_pickle=False" in caplog.text, caplog.text


def _refused_with_key(stored: Path, where: Path, caplog: pytest.LogCaptureFixture, field: str, value: object) -> str:
    """The stored page rewritten with one key field changed: never usable; returns what was logged."""
    rec = page_store.read(_here(stored, where))
    assert page_store.write(where, {**rec.key, field: value}, rec.page, rec.matrix)
    with caplog.at_level(logging.WARNING, logger=page_store.log.name):
        assert page_store.usable(where) is None
    return caplog.text


@pytest.mark.parametrize(("field", "value"), [("versions", {"torch": "0.0"}), ("model_size", 1), ("source", "0")])
def test_a_changed_key_is_never_used_and_is_logged(
    stored: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh: None, field: str, value: object
) -> None:
    said = _refused_with_key(stored, tmp_path / "store", caplog, field, value)
    assert f"its key differs in {field}" in said, said


def test_a_store_recorded_on_another_kind_of_device_is_never_used(
    stored: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh: None
) -> None:
    """A recording made on a GPU, on a machine where the page runs on the CPU (or the other way round)."""
    other = "cpu" if page_store.gpu_possible() else "cuda"
    said = _refused_with_key(stored, tmp_path / "store", caplog, "device", other)
    assert f"it was recorded on {other}" in said, said


def test_the_preloads_check_keeps_a_right_store_and_rejects_a_wrong_one(
    loaded_once: None, tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh: None
) -> None:
    """Against the live MiniLM: no store → recorded; the same → checked (bit for bit); one value one float32 step
    off (its hashes right) → deleted, logged, never drawn again by this process; a store whose key differs only in
    what a cold server checks itself (new versions) → stored again for the next start, the old one never drawn."""
    where = tmp_path / "store"
    assert record.check_or_record(where) == "recorded"
    assert record.check_or_record(where) == "checked"
    rec = page_store.read(where)
    key, page, matrix = record.default_page()
    assert rec.key == key and rec.page == page and np.array_equal(rec.matrix, matrix)
    off = rec.matrix.copy()
    off.view(np.uint32)[0, 0] += 1  # the next float32 up
    assert page_store.write(where, rec.key, rec.page, off)
    assert page_store.usable(where) is not None  # a cold server would draw it: its key is right
    with caplog.at_level(logging.WARNING, logger=page_store.log.name):
        assert record.check_or_record(where) == "rejected"
    assert "differs from the live page in the matrix" in caplog.text, caplog.text
    assert not (where / page_store.NPZ).exists() and not (where / page_store.META).exists()
    assert page_store.REJECTED.is_set()
    assert record.check_or_record(where) == "recorded"  # the next start's preload: a fresh recording...
    assert page_store.usable(where) is None  # ...that this process still never draws
    page_store.REJECTED.clear()
    assert page_store.write(where, {**key, "versions": {"torch": "0.0"}}, page, matrix)
    assert record.check_or_record(where) == "re-recorded"
    assert page_store.read(where).key == key


def test_an_unwritable_store_never_breaks_the_preload(loaded_once: None, tmp_path: Path, caplog) -> None:
    """A store folder that cannot be made (its parent is a file): the check says so and logs it, raises nothing."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING, logger=page_store.log.name):
        assert record.check_or_record(blocker / "first-page") == "unwritable"
    assert "could not be stored" in caplog.text
    assert page_store.usable(blocker / "first-page") is None

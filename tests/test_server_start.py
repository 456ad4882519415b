"""The bundled model loads when the server starts (mha_viz/serve/start.py), with the garbage collector paused
(mha_viz/runtime/gcpause.py); app.py stays the page's script for every visit."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from streamlit.web.server.app_discovery import discover_asgi_app

from mha_viz.runtime.gcpause import gc_paused
from mha_viz.serve import start as server_start

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("app.py", "mha_viz/serve/script/streamlit_app.py")


@pytest.mark.parametrize("script", SCRIPTS)
def test_streamlit_run_finds_the_st_app(script: str) -> None:
    """`streamlit run` serves the st.App it finds in the script (and so runs its lifespan at server start)."""
    found = discover_asgi_app(ROOT / script)
    assert found.is_asgi_app and found.app_name == "app"


def test_importing_app_py_is_light() -> None:
    """At server start app.py is imported as a module: it declares the st.App and imports nothing heavy (the
    server answers at once; torch and the dashboard load in the preload thread)."""
    code = (
        "import sys, streamlit as st, app; "
        "assert isinstance(app.app, st.App), type(app.app); "
        "heavy = [m for m in ('torch', 'transformers', 'mha_viz.ui') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_preload_fills_the_model_cache(tmp_path: Path) -> None:
    """After the preload thread, the page's get_model("", "cpu") is a cache hit (loading again would fail here),
    the collector is on again, and the load is one "preload" timing line."""
    timings = tmp_path / "t.jsonl"
    code = """
import gc
from mha_viz.serve import start as server_start
thread = server_start.start()
assert thread is not None and server_start.start() is None  # once per process
thread.join(timeout=300)
assert not thread.is_alive() and gc.isenabled()
from mha_viz.pipeline import road as pipeline
def refuse(*args, **kwargs):
    raise AssertionError("the model was loaded again")
pipeline.load = refuse
from mha_viz.ui.cache import get_model
lm = get_model("", "cpu")
print(lm.name, lm.n_heads, lm.n_layers())
"""
    env = {**os.environ, "MHA_VIZ_TIMINGS": str(timings)}
    env.pop(server_start.OFF, None)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["all-MiniLM-L6-v2", "12", "6"]
    lines = [json.loads(x) for x in timings.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["preload"] and lines[0]["s"] > 0


def test_charts_import_first_and_alone() -> None:
    """import_charts (what a page's early chart needs, serve/early.py) imports plotly and the pandas it reads
    whole, and neither torch nor transformers; import_heavy then imports the rest. A fresh process, as a server's."""
    code = """
import sys
from mha_viz.serve import start
assert start.importing()
start.import_charts()
assert "plotly.tools" in sys.modules and "pandas" in sys.modules and hasattr(sys.modules["pandas"], "Series")
assert not any(m in sys.modules for m in ("torch", "transformers", "mha_viz.ui")), "heavy with the charts"
assert start.importing()
start.import_heavy()
assert not start.importing() and all(m in sys.modules for m in start.HEAVY)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_preload_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(server_start.OFF, "1")
    assert server_start.start() is None


# `streamlit run app.py` loads the model before any visit: checked on the server that
# tests/test_server_ready.py::test_ready_only_after_the_preload_then_the_first_page_draws_a_heatmap starts (one start
# for both: a start costs 10-30 s here).


def test_gc_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still runs
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError
    assert gc.isenabled()


def test_gc_paused_leaves_an_off_collector_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_gc_paused_in_overlapping_threads() -> None:
    """Blocks that overlap in two threads, ending in either order: the collector is on after both."""
    for first_out in (0, 1):
        inside, leave = threading.Barrier(3), [threading.Event(), threading.Event()]  # both blocks and this test

        def block(i: int, inside=inside, leave=leave) -> None:
            with gc_paused():
                inside.wait(timeout=10)
                leave[i].wait(timeout=10)

        threads = [threading.Thread(target=block, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        inside.wait(timeout=10)  # both threads are inside their blocks
        assert not gc.isenabled()
        leave[first_out].set()
        threads[first_out].join(timeout=10)
        assert not gc.isenabled()  # the other block still runs
        leave[1 - first_out].set()
        threads[1 - first_out].join(timeout=10)
        assert gc.isenabled()

"""MHA_VIZ_TIMINGS: one JSON line per script run (page or fragment), with the time spent handing figures over."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from mha_viz.ui import timing


def test_each_run_appends_one_line(tmp_path, monkeypatch) -> None:
    path = tmp_path / "timings.jsonl"
    monkeypatch.setenv("MHA_VIZ_TIMINGS", str(path))
    at = AppTest.from_file("../app.py", default_timeout=180).run()
    at.query_params["view"] = "Heads"
    at.run()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["page", "page"]
    for x in lines:
        assert 0 < x["plot_s"] <= x["s"]
        assert x["figures"] >= 1
    assert not at.exception


def test_nothing_written_without_the_variable(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("MHA_VIZ_TIMINGS", raising=False)
    monkeypatch.chdir(tmp_path)
    with timing.timed_run("page"), timing.timed_plot():
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_nested_run_is_counted_once(tmp_path, monkeypatch) -> None:
    path = tmp_path / "t.jsonl"
    monkeypatch.setenv("MHA_VIZ_TIMINGS", str(path))
    with timing.timed_run("page"):
        with timing.timed_plot():
            pass
        timing.timed_fragment(lambda: None)()  # a fragment's first run is part of the page's
    (line,) = path.read_text().splitlines()
    assert json.loads(line)["kind"] == "page" and json.loads(line)["figures"] == 1

"""The dashboard page with the real bundled model (Streamlit's AppTest, no browser)."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from conftest import SENTENCE

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def heatmaps(at: AppTest) -> list[dict]:
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return [t for t in spec["data"] if t["type"] == "heatmap"]


def test_default_page_shows_twelve_heads(minilm) -> None:
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    maps = heatmaps(at)
    assert len(maps) == 12
    labels = list(maps[0]["x"])
    assert labels == list(maps[0]["y"]) and "animal" in labels and labels[0] == "[CLS]"
    assert at.sidebar.text_input[0].value == SENTENCE


def test_layer_and_text_change_the_figure(minilm) -> None:
    at = AppTest.from_file(APP, default_timeout=120).run()
    first = heatmaps(at)[0]["z"]
    at.sidebar.selectbox[0].set_value(5).run()
    assert not at.exception and heatmaps(at)[0]["z"] != first
    at.sidebar.text_input[0].set_value("humpty dumpty sat on").run()
    assert "dump" in heatmaps(at)[0]["x"]


def test_empty_text_shows_an_error_and_keeps_running(minilm) -> None:
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.sidebar.text_input[0].set_value("   ").run()
    assert not at.exception and "empty" in at.error[0].value
    at.sidebar.text_input[0].set_value(SENTENCE).run()
    assert not at.exception and len(heatmaps(at)) == 12

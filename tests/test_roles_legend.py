"""The Head roles map's key of labels: one legend entry per label, in a column of its own to the right of the map,
with room for its longest entry and a row for each (issue 21 §1.6: the colour-bar ticks overlapped and were cut)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from mha_viz.figures import roles_map
from mha_viz.figures.finish import _text_px, finish

APP = str(Path(__file__).resolve().parents[1] / "app.py")
ROW_PX = 20  # a legend row at 12 px


def check_legend(spec: dict, labels: np.ndarray) -> None:
    layout = spec["layout"]
    heat = next(t for t in spec["data"] if t["type"] == "heatmap")
    assert heat.get("showscale") is False  # no colour bar: its ticks overlapped
    entries = [html.unescape(t["name"]) for t in spec["data"] if t.get("showlegend")]  # names are escaped
    counts = {str(v): int((labels == v).sum()) for v in np.unique(labels)}
    assert sorted(entries) == sorted(f"{k} ({v})" for k, v in counts.items())
    legend = layout["legend"]
    assert legend.get("orientation", "v") == "v" and legend["x"] >= 1.0 and legend["xanchor"] == "left"
    size = legend["font"]["size"]
    widest = max(_text_px(e, size)[0] for e in entries)
    assert layout["margin"]["r"] >= widest + 40, (layout["margin"], widest)  # symbol, gap, text
    plot_h = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    assert plot_h >= ROW_PX * (len(entries) + 1), (plot_h, len(entries))  # the title and a row per entry


def test_roles_legend_fits_with_long_labels() -> None:
    names = ["mixed", "[SEP] sink", "[CLS] sink", "previous token", "<|im_start|> sink", "broad", "self",
             "first-token sink", "duplicate token", "punctuation"]  # fmt: skip
    labels = np.array([[names[(la * 9 + h) % len(names)] for h in range(9)] for la in range(6)], dtype=object)
    scores = {"prev": np.zeros((6, 9))}
    check_legend(finish(roles_map(labels, scores, "SmolLM2-like")), labels)


def test_app_roles_legend(minilm) -> None:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["view"] = "Head roles"
    at.run()
    assert not at.exception and not at.error
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    labels = np.array([r for r in at.dataframe[0].value["label"]], dtype=object)
    check_legend(spec, labels)

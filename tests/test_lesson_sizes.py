"""The Lesson's n × n matrices (steps 3-6) at a readable size: two per row as in Step by step (its sizing rule: rows
of two, 380 px high), cells of at least 14 px, and "it"'s row marked (issue 21 §1.5: three per row left a plot area
of about 130 × 272 px for [15 × 15] with overlapping x labels)."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
SQUARE = ("Q_", "÷ √d_k", "mask (", "softmax")  # titles of steps 3-6 (analysis.steps.head_steps')
MIN_CELL_PX = 14
COLUMN_PX = 390  # one of two columns in a Lesson step at a 1280 px page (measured in Chromium: plot areas 210-220 px)


def test_lesson_matrices_are_readable_and_mark_it(minilm) -> None:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["view"] = "Lesson"
    at.run()
    at.button(key="lesson_open_all").click().run()
    assert not at.exception and not at.error
    seen = 0
    for col in at.columns:
        for chart in col.get("plotly_chart"):
            spec = json.loads(chart.proto.spec)
            title = spec["layout"].get("title", {}).get("text", "")
            if not title.startswith(SQUARE) or "[15 × 15]" not in title:
                continue
            seen += 1
            assert col.weight >= 0.5, (title, col.weight)  # at most two matrices side by side
            layout = spec["layout"]
            plot_h = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
            assert plot_h / 15 >= MIN_CELL_PX, (title, plot_h)
            plot_w = COLUMN_PX - layout["margin"]["l"] - layout["margin"]["r"]  # the colour bar is in margin r
            assert plot_w / 15 >= MIN_CELL_PX, (title, layout["margin"])
            marks = [s for s in layout.get("shapes", []) if s.get("type") == "rect"]
            assert [(m["y0"], m["y1"]) for m in marks] == [(9.5, 10.5)], (title, marks)  # row 10: "it"
    assert seen >= 4, seen

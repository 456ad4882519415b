"""The one module of shared AppTest helpers (issue 36 §4): the page runner, the AppTest builders and the chart
readers. Test files import these (and conftest's fixtures), never another test file (tests/test_house_rules.py).

Streamlit's testing module is imported inside the functions that use it, so that collecting a test module that
imports this one costs nothing (``--fast`` collects every module and deselects the app tier); tests/tiers.py still
finds the AppTest through these functions and gives their callers the ``app`` tier."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mha_viz.ui.own_controls import OWN_TOKENS
from mha_viz.ui.sidebar import SOURCES

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
OWN_TEXT = "humpty dumpty sat on"
# own weights in a link: 8 heads of d_model 512, the text split into words
OWN = {"src": SOURCES["own"], "text": OWN_TEXT, "own_tokens": OWN_TOKENS["words"], "own_heads": "8", "d_model": "512"}


def new_app(**params: str) -> AppTest:
    """The dashboard in an AppTest with ``params`` in its link, not run yet (set session state, then ``.run()``)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in params.items():
        at.query_params[k] = v
    return at


def run_app(**params: str) -> AppTest:
    """The dashboard run once with ``params`` in its link."""
    return new_app(**params).run()


def specs(at: AppTest) -> list[dict]:
    """Every Plotly chart of the page, as its JSON spec."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def heatmaps(spec: dict) -> list[dict]:
    return [t for t in spec["data"] if t["type"] == "heatmap"]


def panels(at: AppTest) -> list[tuple[str, dict]]:
    """Every matrix drawn, in order, as (its title, a spec of its traces alone): a chart's own title, or each panel
    of a pair drawn as one chart (figures.matrix_pair: the titles over the panels, the traces on x and x2)."""
    out = []
    for spec in specs(at):
        layout = spec["layout"]
        if layout.get("meta") == "matrix panels":  # figures.stack: rows of pairs in one chart, panel i on x<i+1>
            for i, note in enumerate(layout["annotations"]):
                axis = f"x{i + 1 if i else ''}"
                out.append((note["text"], {"data": [t for t in spec["data"] if t["xaxis"] == axis], "layout": layout}))
            continue
        title = (layout.get("title") or {}).get("text")
        if title or "xaxis2" not in layout or "xaxis3" in layout:  # a chart of its own, or a grid
            out.append((title or "", spec))
            continue
        for note, axis in zip(layout.get("annotations", []), ("x", "x2"), strict=False):
            data = [t for t in spec["data"] if t.get("xaxis", "x") == axis]
            out.append((note["text"], {"data": data, "layout": layout}))
    return out


def by_title(at: AppTest) -> dict[str, dict]:
    return dict(panels(at))


def step(at: AppTest, prefix: str) -> tuple[str, np.ndarray]:
    """The one panel whose title starts with ``prefix``: (its title, its first trace's z)."""
    (title,) = [t for t in by_title(at) if t.startswith(prefix)]
    return title, array(by_title(at)[title]["data"][0]["z"])


def array(value: Any) -> np.ndarray:
    """A Plotly typed array ({dtype, bdata, shape}) or a plain list, as numpy."""
    if isinstance(value, dict) and "bdata" in value:
        shape = [int(s) for s in str(value.get("shape", "")).split(",") if s.strip()] or [-1]
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"])).reshape(shape)
    return np.asarray(value, dtype=float)


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def ignored_note(at: AppTest) -> str:
    """The one "Ignored from the link" warning, with the markdown escapes removed ("" when there is none)."""
    notes = [w.value.replace("\\", "") for w in at.warning if "Ignored from the link" in w.value]
    assert len(notes) <= 1, notes
    return notes[0] if notes else ""


def upload(at: AppTest, data: bytes | None) -> AppTest:
    """Own weights uploaded in the sidebar (``None``: the upload removed), and the page run."""
    files = None if data is None else ("w.safetensors", data, "application/octet-stream")
    return at.sidebar.file_uploader(key="upload").set_value(files).run()


def open_all(at: AppTest) -> AppTest:
    """Press the Lesson's "Open all steps": every step and both claims open (the page starts with step 1 only)."""
    at.button(key="lesson_open_all").click().run()
    assert_clean(at)
    assert at.button(key="lesson_open_all").label == "Close all steps"
    return at

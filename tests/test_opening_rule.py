"""One opening-head rule (issue 36 §2): the app (ui.found.found_head, the Lesson's and Lines' first head), the notebook
API (show.found, show.lines) and the CLI (export's default layer and head) open on the same "it" → "animal" head,
the one analysis.opening picks; checked on the bundled MiniLM and a tiny random LLaMA (a decoder with grouped K/V)
against referents.specific_head over every layer's own pattern (independent of the app's cache)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from apptest_helpers import run_app

from mha_viz import figures, show
from mha_viz.analysis.plans.lesson import lesson_opening
from mha_viz.analysis.plans.lines import opening as lines_opening
from mha_viz.analysis.referents import default_pair, specific_head
from mha_viz.cli.export import figures_of
from mha_viz.config import Config
from mha_viz.pipeline.road import traces
from mha_viz.selection import Selection
from mha_viz.ui.found import found_head
from tests.conftest import SENTENCE

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models


def _reference(model: str) -> tuple[int, int]:
    """specific_head over every layer's whole pattern, from the pipeline (not through the app, show or the CLI)."""
    tokens, _, layers = traces(Config(model=model), SENTENCE)
    pair = default_pair(list(tokens.labels))
    assert pair is not None
    patterns = np.stack([t.pattern.numpy() for t in layers])  # [L, H, n, n]
    return specific_head(patterns, *pair)[:2]


@pytest.fixture(params=["minilm", "llama"])
def model(request, minilm, llama_dir: str) -> str:
    return "" if request.param == "minilm" else llama_dir


def test_the_app_the_notebook_and_the_cli_open_the_same_head(model: str) -> None:
    want = _reference(model)
    app = found_head(Selection(Config(model=model), SENTENCE))
    assert app is not None and (app.layer, app.head) == want
    assert show.found(SENTENCE, model=model)[:2] == want
    args = argparse.Namespace(view="head", text=SENTENCE, model=model, layer=None, head=None, focus=None)
    settings = figures_of(args, "cpu")[1]
    assert (int(settings["layer"]), int(settings["head"])) == want
    t = show.trace(SENTENCE, want[0], model)  # the found layer: the Lesson's and Lines' first head there
    p = t.pattern.numpy()  # [h, n, n]
    assert lesson_opening(p, t.tokens, t.key_tokens).head == want[1]
    assert figures.strongest_head(p, t.tokens, t.key_tokens) == want[1]
    assert lines_opening(p, t.tokens, t.key_tokens) == want[1]  # the Lines view's plan
    assert show.lines(SENTENCE, want[0], model=model).layout.title.text.startswith(f"Layer {want[0]}, head {want[1]}:")


def test_the_lesson_and_lines_views_open_on_it(minilm) -> None:
    """A fresh session's Lesson and Lines (AppTest) show the same head as show.found."""
    layer, head, _ = show.found(SENTENCE)
    at = run_app(view="Lesson")
    assert not at.exception and at.selectbox(key="layer").value == layer
    assert at.selectbox(key="lesson_head").value == head
    at = run_app(view="Lines")
    assert not at.exception and at.multiselect(key="lines_heads").value == [head]

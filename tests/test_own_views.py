"""Own weights in every view: each draws the own layer (1 layer × the own head count), never the bundled model's
recorded pass (issue 21 §1.1: the Overview drew MiniLM's 6 × 12 tiles under an "own weights" caption)."""

from __future__ import annotations

import numpy as np
import pytest
from test_app import array, assert_clean, heatmaps, run_app, specs

from mha_viz.config import Config
from mha_viz.pipeline.own_road import own_trace
from mha_viz.pipeline.road import load
from mha_viz.ui.cache import get_recording
from mha_viz.ui.own_controls import OWN_TOKENS
from mha_viz.ui.sidebar import SOURCES, VIEWS

TEXT = "humpty dumpty sat on"
OWN = {"src": SOURCES["own"], "text": TEXT, "own_tokens": OWN_TOKENS["words"], "own_heads": "8", "d_model": "512"}


def _recorded_texts() -> set[str]:
    """The texts whose model pass is in the recording cache (key: ((model, device, text, target), {}))."""
    return {key[0][2] for key in list(get_recording.cache._items)}


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_draws_the_own_layer(view: str) -> None:
    get_recording.cache.clear()
    at = run_app(**OWN, view=view)
    assert_clean(at)
    assert TEXT not in _recorded_texts(), f"{view} ran the bundled model on the text under an own-weights caption"
    for spec in specs(at):  # no figure shows a layer the own weights do not have
        title = str(spec.get("layout", {}).get("title", {}).get("text", ""))
        assert "6 layers" not in title and "12 heads" not in title, (view, title)


def test_overview_tiles_are_the_own_pattern() -> None:
    at = run_app(**OWN, view="Overview")
    assert_clean(at)
    config = Config(model="own", d_model=512, n_heads=8, seed=0, tokens="words")
    _, _, trace = own_trace(load(Config()), TEXT, config)
    want = trace.pattern.numpy()  # [8, 4, 4]
    drawn = [array(h["z"]) for spec in specs(at) for h in heatmaps(spec)]
    values = np.concatenate([z.ravel() for z in drawn])
    values = values[np.isfinite(values)]
    assert values.size == want.size, (values.size, want.size)  # 1 layer × 8 heads × 4 × 4, not 6 × 12 × 4 × 4
    np.testing.assert_allclose(np.sort(values), np.sort(want.ravel()), atol=1e-6)

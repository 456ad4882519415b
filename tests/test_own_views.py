"""Own weights in every view: each draws the own layer (1 layer × the own head count), never the bundled model's
recorded pass (issue 21 §1.1: the Overview drew MiniLM's 6 × 12 tiles under an "own weights" caption)."""

from __future__ import annotations

import numpy as np
import pytest
from apptest_helpers import OWN, OWN_TEXT, array, assert_clean, heatmaps, run_app, specs

from conftest import SENTENCE
from mha_viz.config import Config
from mha_viz.pipeline.own_road import own_trace
from mha_viz.pipeline.road import load
from mha_viz.ui.cache import get_recording
from mha_viz.ui.sidebar import VIEWS

TEXT = OWN_TEXT


def _recorded_texts() -> set[str]:
    """The texts whose model pass is in the recording cache (key: ((model, device, text, target), {}))."""
    return {key[0][2] for key in list(get_recording.cache._items)}


NO_PRETRAINED = ("Two sentences", "Circuits", "Where does it look?", "Head roles")  # need no pretrained model


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_draws_the_own_layer(view: str) -> None:
    """One AppTest per view on own weights. The four views that need no pretrained model run on the seed sentence
    (Two sentences compares it with "… too wide"): before, each answered "looks across the layers of a pretrained
    model" and drew nothing. The Overview's tiles are the own layer's pattern (1 layer × 8 heads)."""
    text = SENTENCE if view in NO_PRETRAINED else TEXT
    get_recording.cache.clear()
    at = run_app(**{**OWN, "text": text}, view=view)
    assert_clean(at)
    assert text not in _recorded_texts(), f"{view} ran the bundled model on the text under an own-weights caption"
    for spec in specs(at):  # no figure shows a layer the own weights do not have
        title = str(spec.get("layout", {}).get("title", {}).get("text", ""))
        assert "6 layers" not in title and "12 heads" not in title, (view, title)
    if view in NO_PRETRAINED:
        assert not any("pretrained" in i.value for i in at.info), [i.value for i in at.info]
        assert specs(at) and not at.warning, [w.value for w in at.warning]
    if view == "Overview":
        _overview_tiles_are_the_own_pattern(at)


def _overview_tiles_are_the_own_pattern(at) -> None:
    config = Config(model="own", d_model=512, n_heads=8, seed=0, tokens="words")
    _, _, trace = own_trace(load(Config()), TEXT, config)
    want = trace.pattern.numpy()  # [8, 4, 4]
    drawn = [array(h["z"]) for spec in specs(at) for h in heatmaps(spec)]
    values = np.concatenate([z.ravel() for z in drawn])
    values = values[np.isfinite(values)]
    assert values.size == want.size, (values.size, want.size)  # 1 layer × 8 heads × 4 × 4, not 6 × 12 × 4 × 4
    np.testing.assert_allclose(np.sort(values), np.sort(want.ravel()), atol=1e-6)


SEED_000 = {**OWN, "own_heads": "8", "d_model": "512", "seed": "0"}  # the seed 000 worked example


def test_circuits_of_own_weights_are_their_one_layers_circuits() -> None:
    """Issue 35 §2.3: Circuits said "looks across the layers of a pretrained model" for own weights, although the
    circuits of own weights are exactly the seed 000 exercise. Now: each head's W_Q·W_Kᵀ and W_V·W_O singular
    values and copying score, from the weights themselves (numpy on the full d_model × d_model products here)."""
    from mha_viz.own import init_weights

    at = run_app(**SEED_000, view="Circuits", circ_head="head 3")
    assert_clean(at)
    assert not [i.value for i in at.info if "pretrained" in i.value]
    w = init_weights(512, 8, 0, "xavier", False)
    qk = (w.W_Q[3] @ w.W_K[3].T).double().numpy()  # [512, 512]
    ov = (w.W_V[3] @ w.W_O[3]).double().numpy()
    spectra, copy_map = specs(at)
    bars = [array(t["y"]) for t in spectra["data"] if t["type"] == "bar"]
    np.testing.assert_allclose(bars[0], np.linalg.svd(qk, compute_uv=False)[:64], rtol=1e-4)
    np.testing.assert_allclose(bars[1], np.linalg.svd(ov, compute_uv=False)[:64], rtol=1e-4)

    def copying(m: np.ndarray) -> float:
        lam = np.linalg.eigvals(m)
        return float(np.real(lam.sum()) / np.abs(lam).sum())

    scores = array(heatmaps(copy_map)[0]["z"])
    want = [copying((w.W_V[h] @ w.W_O[h]).double().numpy()) for h in range(8)]
    assert scores.shape == (1, 8)  # one layer
    np.testing.assert_allclose(scores[0], want, atol=2e-3)  # eigenvalues of a 512 × 512 rank-64 matrix
    assert {m.label: m.value for m in at.metric}["Copying score of head 3"] == f"{want[3]:+.3f}"
    table = at.table[0].value  # OV: the text's own tokens (words) as sources
    assert list(table["source token"]) == TEXT.split()

"""The Head importance and Circuits tabs with the real bundled models, through AppTest."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

from conftest import SENTENCE
from mha_viz.models.projections import head_weights
from mha_viz.studies import importance as im
from mha_viz.ui.cache_studies import IMPORTANCE


def test_importance_map_is_the_ablation_scan(minilm) -> None:
    IMPORTANCE.clear()  # a scan or curve another test of this worker left (test_view_estimates) would be drawn at once
    at = run_app(view="Head importance")
    assert_clean(at)
    (fig,) = specs(at)
    (hm,) = heatmaps(fig)
    expected = im.head_importance(im.Scorer(minilm, [SENTENCE]))
    np.testing.assert_allclose(array(hm["z"]), expected, rtol=1e-4, atol=1e-7)
    assert any("Most important: layer 5 head 11" in m.value for m in at.markdown)
    at.button(key=next(b.key for b in at.button if b.label == "Compute the pruning curve")).click().run()
    assert_clean(at)
    curve = next(s for s in specs(at) if s["data"][0]["type"] == "scatter")
    ours = next(t for t in curve["data"] if t.get("name") == "least important first")
    y = array(ours["y"])
    everything = im.Scorer(minilm, [SENTENCE]).score([(la, h) for la in range(6) for h in range(12)])
    assert y[0] == 0.0 and y[-1] == pytest.approx(everything, rel=1e-5) and len(y) == 73


def test_big_models_scan_on_request() -> None:
    at = run_app(view="Head importance", src="SmolLM2-135M (bundled)")
    assert_clean(at)
    assert [b.label for b in at.button if b.label.startswith("Scan")] == ["Scan all 270 heads"]
    assert not specs(at)


def test_long_texts_scan_on_request() -> None:
    """72 heads on a 100-token text: a pass per head of the whole model is seconds, so it waits for the button."""
    text = " ".join(["The animal didn't cross the street because it was too tired."] * 8)  # ~110 tokens
    at = run_app(view="Head importance", text=text)
    assert_clean(at)
    assert [b.label for b in at.button if b.label.startswith("Scan")] == ["Scan all 72 heads"]
    assert not specs(at) and any("72 heads × 1 text(s)" in c.value for c in at.caption)


def test_circuits_tab_matches_the_full_products(minilm) -> None:
    at = run_app(view="Circuits", layer="5", circ_head="head 11")
    assert_clean(at)
    spectra_fig, copy_map = specs(at)
    w = head_weights(minilm, "encoder", 5)
    full_qk = w.W_Q[11].double() @ w.W_K[11].double().T  # [384, 384], only to check the factor route
    full_ov = w.W_V[11].double() @ w.W_O[11].double()
    bars = [t for t in spectra_fig["data"] if t["type"] == "bar"]
    np.testing.assert_allclose(array(bars[0]["y"]), torch.linalg.svdvals(full_qk)[:32].numpy(), rtol=1e-5)
    np.testing.assert_allclose(array(bars[1]["y"]), torch.linalg.svdvals(full_ov)[:32].numpy(), rtol=1e-5)
    eig = np.linalg.eigvals(full_ov.numpy())
    z = array(heatmaps(copy_map)[0]["z"])
    assert z[5, 11] == pytest.approx(float(np.real(eig.sum()) / np.abs(eig).sum()), abs=1e-4)
    assert any("Copying score of head 11" in m.label for m in at.metric)
    assert len(at.table) == 2  # OV destinations and QK pairs


def test_circuits_on_a_rotary_decoder_say_what_qk_means() -> None:
    at = run_app(view="Circuits", src="SmolLM2-135M (bundled)", layer="17")
    assert_clean(at)
    assert any("rotary" in i.value for i in at.info)
    assert len(specs(at)) == 2

"""Norm-based attention (Kobayashi et al. 2020) against a direct computation from the trace."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import SENTENCE
from mha_viz.analysis import norms
from mha_viz.config import Config
from mha_viz.models.load import load_model
from mha_viz.pipeline.road import traces


def _direct(t) -> np.ndarray:
    """‖α_ij · v_j W_O^h‖ one vector at a time."""
    h, n, nk = t.pattern.shape
    out = np.zeros((h, n, nk))
    for head in range(h):
        v = t.v[head // t.group].double()
        for i in range(n):
            for j in range(nk):
                out[head, i, j] = torch.linalg.vector_norm(t.pattern[head, i, j].double() * v[j] @ t.W_O[head].double())
    return out


def test_contributions_equal_the_norm_of_what_each_key_sends(minilm) -> None:
    _, _, (t,) = traces(Config(), SENTENCE, layers=[5], lm=minilm)
    c = norms.contributions(t)
    np.testing.assert_allclose(c, _direct(t), rtol=1e-9, atol=1e-12)
    shares = norms.shown_pattern(t, "contribution")
    np.testing.assert_allclose(shares.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(shares, c / c.sum(-1, keepdims=True), atol=1e-6)
    np.testing.assert_array_equal(norms.shown_pattern(t, "weight"), t.pattern.numpy())
    with pytest.raises(ValueError):
        norms.shown_pattern(t, "nonsense")


def test_grouped_query_heads_read_their_kv_head(llama_dir: str) -> None:
    lm = load_model(llama_dir, "cpu")
    _, _, (t,) = traces(Config(model=llama_dir), SENTENCE, layers=[0], lm=lm)
    assert t.group == 2
    np.testing.assert_allclose(norms.contributions(t), _direct(t), rtol=1e-9, atol=1e-12)


def test_sink_collapses_under_contribution_on_minilm(minilm) -> None:
    """MiniLM's layer-5 heads put much weight on [CLS]/[SEP] whose vectors move little: the share drops."""
    _, _, (t,) = traces(Config(), SENTENCE, layers=[5], lm=minilm)
    sink = [lab in ("[CLS]", "[SEP]") for lab in t.key_tokens]
    s = norms.sink_shares(t.pattern.numpy(), norms.contributions(t), sink)
    pattern = t.pattern.numpy()
    np.testing.assert_allclose(s["weight"], pattern[..., np.asarray(sink)].sum(-1).mean(-1), rtol=1e-6)
    assert s["contribution"].mean() < s["weight"].mean()


def test_row_shares_of_zero_rows_stay_zero() -> None:
    values = np.array([[[0.0, 0.0], [1.0, 3.0]]])
    np.testing.assert_allclose(norms.row_shares(values), [[[0.0, 0.0], [0.25, 0.75]]])


def test_the_switch_draws_contributions_in_rollout_and_overview(minilm) -> None:
    from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

    from mha_viz.analysis.patterns import rollout

    _, _, ts = traces(Config(), SENTENCE, lm=minilm)
    shares = np.stack([norms.shown_pattern(t, "contribution") for t in ts])  # [L, H, n, n]
    at = run_app(view="Rollout", contrib="true")
    assert_clean(at)
    (roll,) = heatmaps(specs(at)[0])
    np.testing.assert_allclose(array(roll["z"]), rollout(shares)[-1], atol=1e-5)
    assert any("Kobayashi" in c.value for c in at.caption)
    plain = run_app(view="Rollout")
    (weights,) = heatmaps(specs(plain)[0])
    assert not np.allclose(array(weights["z"]), array(roll["z"]), atol=1e-3)  # the switch changes what is drawn
    at = run_app(view="Overview", contrib="true")
    assert_clean(at)
    tiles = array(heatmaps(specs(at)[0])[0]["z"])  # tiles with NaN gaps between them
    weight_tiles = array(heatmaps(specs(run_app(view="Overview"))[0])[0]["z"])
    assert np.nanmax(tiles) <= 1 + 1e-6 and any("Kobayashi" in c.value for c in at.caption)
    assert not np.allclose(np.nan_to_num(tiles), np.nan_to_num(weight_tiles), atol=1e-3)


def test_heads_view_draws_contributions_and_the_sink_panel(minilm) -> None:
    from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

    at = run_app(view="Heads", layer="2", contrib="true")
    assert_clean(at)
    at.session_state["sinks_open"] = True  # open the (lazy) sink panel
    at.run()
    assert_clean(at)
    _, _, (t,) = traces(Config(), SENTENCE, layers=[2], lm=minilm)
    grid = heatmaps(specs(at)[0])
    np.testing.assert_allclose(array(grid[4]["z"]), norms.shown_pattern(t, "contribution")[4], atol=1e-6)
    sink = next(s for s in specs(at) if "by contribution" in str(s["layout"].get("title", "")))
    by_weight, by_contribution = (array(tr["y"]) for tr in sink["data"])
    mask = [lab in ("[CLS]", "[SEP]") for lab in t.key_tokens]
    expected = norms.sink_shares(t.pattern.numpy(), norms.contributions(t), mask)
    np.testing.assert_allclose(by_weight, expected["weight"], atol=1e-6)
    np.testing.assert_allclose(by_contribution, expected["contribution"], atol=1e-6)

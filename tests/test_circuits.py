"""QK/OV circuits: singular values and eigenvalues through the small factors, against the full products;
the copying score on circuits whose answer is known; the weights read from real models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import SENTENCE
from mha_viz.config import Config
from mha_viz.models.load import load_model
from mha_viz.models.projections import HeadWeights, embedding_matrix, head_weights, unembedding_matrix
from mha_viz.pipeline.road import traces
from mha_viz.studies import circuits


def _weights(d: int = 24, dh: int = 4, h: int = 2, kv: int = 2, seed: int = 0) -> HeadWeights:
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    return HeadWeights(r(h, d, dh), r(kv, d, dh), r(kv, d, dh), r(h, dh, d), rotary=False)


def test_singular_values_through_factors_equal_the_full_products() -> None:
    w = _weights(kv=1)  # grouped: both query heads read K/V head 0
    for head in range(2):
        full_qk = w.W_Q[head].double() @ w.W_K[0].double().T  # [d, d]: built here only to check
        full_ov = w.W_V[0].double() @ w.W_O[head].double()
        np.testing.assert_allclose(circuits.qk_singular_values(w, head), torch.linalg.svdvals(full_qk)[:4], rtol=1e-9)
        np.testing.assert_allclose(circuits.ov_singular_values(w, head), torch.linalg.svdvals(full_ov)[:4], rtol=1e-9)
        eig_full = np.linalg.eigvals(full_ov.numpy())
        eig_full = eig_full[np.argsort(-np.abs(eig_full))][:4]
        eig = circuits.ov_eigenvalues(w.W_V[0], w.W_O[head])
        np.testing.assert_allclose(np.sort_complex(eig), np.sort_complex(eig_full), atol=1e-8)


def test_known_singular_values_and_copying_scores() -> None:
    d, dh = 16, 4
    w_v = torch.zeros(1, d, dh)
    w_v[0, :dh] = torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.5]))
    w_o = torch.zeros(1, dh, d)
    w_o[0, :, :dh] = torch.eye(dh)
    copy = HeadWeights(w_v, w_v, w_v, w_o, rotary=False)
    np.testing.assert_allclose(circuits.ov_singular_values(copy, 0), [3.0, 2.0, 1.0, 0.5], rtol=1e-12)
    assert circuits.head_copying_score(copy, 0) == pytest.approx(1.0)  # positive diagonal: copies
    assert circuits.head_copying_score(HeadWeights(w_v, w_v, w_v, -w_o, rotary=False), 0) == pytest.approx(-1.0)
    rot = torch.zeros(1, dh, d)  # a 90° rotation in two planes: eigenvalues ±i, neither copies nor suppresses
    rot[0, 0, 1], rot[0, 1, 0], rot[0, 2, 3], rot[0, 3, 2] = 1.0, -1.0, 1.0, -1.0
    eye_v = torch.zeros(1, d, dh)
    eye_v[0, :dh] = torch.eye(dh)
    assert circuits.head_copying_score(HeadWeights(eye_v, eye_v, eye_v, rot, rotary=False), 0) == pytest.approx(0.0)
    assert circuits.copying_score(np.zeros(3)) == 0.0


def test_token_scores_equal_the_products_they_stand_for() -> None:
    w = _weights(kv=1)
    embed = torch.randn(30, 24, generator=torch.Generator().manual_seed(1))
    read = torch.randn(30, 24, generator=torch.Generator().manual_seed(2))
    src = [3, 7, 7, 11]
    ov = circuits.ov_token_scores(w, 1, embed, src, read)
    expected = embed[src].double() @ (w.W_V[0].double() @ w.W_O[1].double()) @ read.double().T
    np.testing.assert_allclose(ov.numpy(), expected.numpy(), rtol=1e-10, atol=1e-10)
    qk = circuits.qk_token_scores(w, 0, embed, [1, 2], [4, 5, 6])
    expected = embed[[1, 2]].double() @ w.W_Q[0].double() @ w.W_K[0].double().T @ embed[[4, 5, 6]].double().T
    np.testing.assert_allclose(qk.numpy(), expected.numpy(), rtol=1e-10, atol=1e-10)
    top = circuits.top_pairs(torch.tensor([[1.0, 5.0], [7.0, 2.0]]), [10, 20], 2)
    assert top == [(20, 0, 7.0), (10, 1, 5.0)]


def test_minilm_weights_reproduce_the_recorded_q_k_v(minilm) -> None:
    """W_Q, W_K, W_V read for the circuits are the ones the model used: X W + b equals the recorded q, k, v."""
    _, _, (t,) = traces(Config(), SENTENCE, layers=[3], lm=minilm)
    w = head_weights(minilm, "encoder", 3)
    from mha_viz.models.offload import linear_in_out

    site = minilm.site("encoder", 3)
    biases = [linear_in_out(minilm.model.get_submodule(n))[1].reshape(12, -1) for n in site.qkv]
    for mat, bias, used in ((w.W_Q, biases[0], t.q), (w.W_K, biases[1], t.k), (w.W_V, biases[2], t.v)):
        rebuilt = t.x @ mat + bias[:, None, :]  # [h, n, dh]
        torch.testing.assert_close(rebuilt, used, atol=2e-5, rtol=1e-4)
    assert not w.rotary and embedding_matrix(minilm).shape[1] == 384 and unembedding_matrix(minilm) is None


def test_rotary_model_gives_pre_rotation_projections(llama_dir: str) -> None:
    """For a rotary decoder with grouped K/V: W_Q, W_K reproduce q and k before rotation, W_V reproduces v."""
    lm = load_model(llama_dir, "cpu")
    _, _, (t,) = traces(Config(model=llama_dir), SENTENCE, layers=[1], lm=lm)
    w = head_weights(lm, "decoder", 1)
    assert w.rotary and w.group == 2 and w.W_Q.shape[0] == 4 and w.W_K.shape[0] == 2
    torch.testing.assert_close(t.x @ w.W_Q, t.q_pre, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(t.x @ w.W_K, t.k_pre, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(t.x @ w.W_V, t.v, atol=1e-5, rtol=1e-4)
    assert unembedding_matrix(lm).shape == embedding_matrix(lm).shape
    assert circuits.layer_copying_scores(w).shape == (4,)

"""Re-split heads and W^O variants: shapes, invariants, and that nothing is mutated."""

from __future__ import annotations

import pytest
import torch

from conftest import random_weights
from mha_viz.attention import compute_trace
from mha_viz.edits import ablate_heads, apply_wo, divisors, regroup_heads, scale_heads, wo_random
from mha_viz.trace import AttentionWeights, MhaVizError


def snapshot(w: AttentionWeights) -> dict[str, torch.Tensor]:
    return {n: t.clone() for n, t in w.tensors().items()}


def assert_unchanged(w: AttentionWeights, before: dict[str, torch.Tensor]) -> None:
    for n, t in w.tensors().items():
        assert torch.equal(t, before[n]), f"{n} was mutated"


@pytest.mark.parametrize("heads", [1, 2, 4, 6, 12])
def test_regroup_shapes_and_rows(tiny: AttentionWeights, tiny_x: torch.Tensor, heads: int) -> None:
    before = snapshot(tiny)
    w = regroup_heads(tiny, heads)
    assert w.W_Q.shape == (heads, 12, 12 // heads) and w.W_O.shape == (heads, 12 // heads, 12)
    t = compute_trace(w, tiny_x, device="cpu", dtype="float64")
    assert t.pattern.shape == (heads, 5, 5)
    torch.testing.assert_close(t.pattern.sum(-1), torch.ones(heads, 5, dtype=torch.float64))
    # The concatenated projections are the same matrices, only grouped differently.
    flat = lambda m: m.permute(1, 0, 2).reshape(12, 12)
    torch.testing.assert_close(flat(w.W_Q), flat(tiny.W_Q), rtol=0, atol=0)
    torch.testing.assert_close(w.W_O.reshape(12, 12), tiny.W_O.reshape(12, 12), rtol=0, atol=0)
    assert_unchanged(tiny, before)


def test_regroup_round_trip_is_exact(tiny: AttentionWeights) -> None:
    back = regroup_heads(regroup_heads(tiny, 4), 3)
    for n, t in tiny.tensors().items():
        assert torch.equal(back.tensors()[n], t)


def test_regroup_non_divisor_lists_valid_choices(tiny: AttentionWeights) -> None:
    with pytest.raises(MhaVizError, match=r"d_model 12 is not divisible by 5 heads; choose one of 1, 2, 3, 4, 6, 12"):
        regroup_heads(tiny, 5)
    with pytest.raises(MhaVizError):
        regroup_heads(tiny, 0)
    assert divisors(384)[:6] == [1, 2, 3, 4, 6, 8]


def test_identity_wo_output_is_concat(tiny: AttentionWeights, tiny_x: torch.Tensor) -> None:
    t = compute_trace(apply_wo(tiny, "identity"), tiny_x, device="cpu", dtype="float64")
    torch.testing.assert_close(t.output, t.concat, rtol=0, atol=1e-12)


def test_random_wo_is_orthogonal_and_seeded(tiny: AttentionWeights) -> None:
    a, b, c = wo_random(tiny, 1), wo_random(tiny, 1), wo_random(tiny, 2)
    m = a.W_O.reshape(12, 12)
    torch.testing.assert_close(m @ m.T, torch.eye(12, dtype=torch.float64), atol=1e-10, rtol=0)
    assert torch.equal(a.W_O, b.W_O) and not torch.equal(a.W_O, c.W_O)
    assert a.b_O is None and tiny.b_O is not None


def test_ablated_heads_contribute_nothing(tiny: AttentionWeights, tiny_x: torch.Tensor) -> None:
    before = snapshot(tiny)
    full = compute_trace(tiny, tiny_x, device="cpu", dtype="float64")
    cut = compute_trace(ablate_heads(tiny, [0, 2]), tiny_x, device="cpu", dtype="float64")
    assert torch.all(cut.head_out[[0, 2]] == 0)
    torch.testing.assert_close(cut.pattern, full.pattern)  # patterns are untouched
    torch.testing.assert_close(cut.output, full.head_out[1] + tiny.b_O)
    assert_unchanged(tiny, before)


def test_scale_heads(tiny: AttentionWeights, tiny_x: torch.Tensor) -> None:
    full = compute_trace(tiny, tiny_x, device="cpu", dtype="float64")
    t = compute_trace(scale_heads(tiny, {1: 2.5}), tiny_x, device="cpu", dtype="float64")
    torch.testing.assert_close(t.head_out[1], 2.5 * full.head_out[1])
    torch.testing.assert_close(t.head_out[0], full.head_out[0])
    with pytest.raises(MhaVizError, match="heads are numbered 0 to 2"):
        ablate_heads(tiny, [3])


def test_square_wo_needs_square_width() -> None:
    w = random_weights(d_model=12, n_heads=3)
    narrow = AttentionWeights(W_Q=w.W_Q[:, :, :2], W_K=w.W_K[:, :, :2], W_V=w.W_V[:, :, :2], W_O=w.W_O[:, :2, :])
    with pytest.raises(MhaVizError, match="n_heads \\* d_head == d_model"):
        apply_wo(narrow, "identity")
    with pytest.raises(MhaVizError, match="unknown W\\^O mode"):
        apply_wo(w, "bogus")


def test_grouped_query_layers_cannot_be_resplit() -> None:
    w = random_weights(d_model=12, n_heads=3)
    gqa = AttentionWeights(W_Q=w.W_Q, W_K=w.W_K[:1], W_V=w.W_V[:1], W_O=w.W_O)
    with pytest.raises(MhaVizError, match="grouped-query"):
        regroup_heads(gqa, 6)
    with pytest.raises(MhaVizError, match="must divide"):
        AttentionWeights(
            W_Q=torch.zeros(3, 4, 2), W_K=torch.zeros(2, 4, 2), W_V=torch.zeros(2, 4, 2), W_O=torch.zeros(3, 2, 4)
        )

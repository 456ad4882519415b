"""The engine against trusted implementations: torch's MultiheadAttention and the per-head loop."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_weights
from mha_viz.attention import compute_trace, loop_attention, resolve_device, resolve_dtype
from mha_viz.edits import wo_identity
from mha_viz.own import from_torch_mha
from mha_viz.trace import AttentionWeights, MhaVizError


def torch_mha(d_model: int, n_heads: int, bias: bool, seed: int = 0) -> torch.nn.MultiheadAttention:
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(d_model, n_heads, bias=bias, dtype=torch.float64)
    if bias:  # torch initialises biases to zero; make them count
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    return mha.eval()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_matches_torch_multihead_attention(bias: bool, causal: bool) -> None:
    mha = torch_mha(24, 4, bias)
    x = torch.randn(7, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    blocked = torch.ones(7, 7, dtype=torch.bool).triu(1) if causal else None  # torch: True = blocked
    out, attn = mha(x, x, x, attn_mask=blocked, need_weights=True, average_attn_weights=False)
    trace = compute_trace(from_torch_mha(mha), x, causal=causal, device="cpu", dtype="float64")
    assert trace.pattern.shape == (4, 7, 7)
    torch.testing.assert_close(trace.pattern, attn.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(trace.output, out.detach(), rtol=0, atol=1e-12)
    if causal:
        assert torch.all(trace.pattern.triu(1) == 0)


def test_key_padding_matches_torch() -> None:
    mha = torch_mha(12, 3, bias=True, seed=5)
    x = torch.randn(6, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    keep = torch.tensor([1, 1, 1, 1, 0, 0], dtype=torch.bool)
    out, attn = mha(x, x, x, key_padding_mask=~keep, need_weights=True, average_attn_weights=False)
    trace = compute_trace(from_torch_mha(mha), x, key_mask=keep, device="cpu", dtype="float64")
    torch.testing.assert_close(trace.pattern, attn.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(trace.output, out.detach(), rtol=0, atol=1e-12)
    assert torch.all(trace.pattern[:, :, 4:] == 0)


@pytest.mark.parametrize("causal", [True, False])
def test_loop_over_heads_equals_batched(tiny: AttentionWeights, tiny_x: torch.Tensor, causal: bool) -> None:
    allowed = torch.ones(5, 5, dtype=torch.bool).tril() if causal else None
    pattern, output = loop_attention(tiny, tiny_x, allowed)
    trace = compute_trace(tiny, tiny_x, causal=causal, device="cpu", dtype="float64")
    torch.testing.assert_close(trace.pattern, pattern, rtol=0, atol=1e-12)
    torch.testing.assert_close(trace.output, output, rtol=0, atol=1e-12)


def test_one_head_identity_wo_is_plain_self_attention() -> None:
    w = wo_identity(random_weights(d_model=12, n_heads=1, bias=False))
    x = torch.randn(6, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    wq, wk, wv = w.W_Q[0], w.W_K[0], w.W_V[0]  # [d, d]
    plain = torch.softmax((x @ wq) @ (x @ wk).T / math.sqrt(12), dim=-1) @ (x @ wv)
    trace = compute_trace(w, x, device="cpu", dtype="float64")
    torch.testing.assert_close(trace.output, plain, rtol=0, atol=1e-12)


def test_intermediates_are_consistent(tiny: AttentionWeights, tiny_x: torch.Tensor) -> None:
    t = compute_trace(tiny, tiny_x, device="cpu", dtype="float64")
    h, n, dh, d = 3, 5, 4, 12
    assert t.q.shape == t.k.shape == t.v.shape == t.z.shape == (h, n, dh)
    assert t.scores.shape == t.pattern.shape == (h, n, n)
    assert t.concat.shape == (n, h * dh) and t.head_out.shape == (h, n, d) and t.output.shape == (n, d)
    torch.testing.assert_close(t.q[1], tiny_x @ tiny.W_Q[1] + tiny.b_Q[1])
    torch.testing.assert_close(t.scores, t.q @ t.k.transpose(1, 2) / math.sqrt(dh))
    torch.testing.assert_close(t.pattern, torch.softmax(t.scores, -1))
    torch.testing.assert_close(t.z, t.pattern @ t.v)
    torch.testing.assert_close(t.concat[:, dh : 2 * dh], t.z[1])
    torch.testing.assert_close(t.output, t.concat @ tiny.W_O.reshape(h * dh, d) + tiny.b_O)
    torch.testing.assert_close(t.output, t.head_out.sum(0) + tiny.b_O)
    assert all(not x.requires_grad and x.device.type == "cpu" for x in t.tensors().values())


def test_unscaled_scores_saturate(tiny: AttentionWeights, tiny_x: torch.Tensor) -> None:
    scaled = compute_trace(tiny, tiny_x, device="cpu", dtype="float64")
    raw = compute_trace(tiny, tiny_x, scaled=False, device="cpu", dtype="float64")
    torch.testing.assert_close(raw.scores, scaled.scores * 2.0)  # sqrt(d_head = 4)
    assert raw.pattern.max(-1).values.mean() > scaled.pattern.max(-1).values.mean()


def test_fully_masked_row_is_even_and_flagged(tiny: AttentionWeights, tiny_x: torch.Tensor) -> None:
    """As transformers' eager attention (the dtype's minimum added to every score): even over every key."""
    allowed = torch.ones(5, 5, dtype=torch.bool)
    allowed[2] = False
    t = compute_trace(tiny, tiny_x, attn_mask=allowed, device="cpu", dtype="float64")
    assert not torch.isnan(t.pattern).any() and not torch.isnan(t.output).any()
    assert torch.all(t.pattern[:, 2] == 0.2)
    assert t.dead_rows.tolist() == [False, False, True, False, False] and t.any_dead_rows
    torch.testing.assert_close(t.z[:, 2], t.v.mean(1).repeat_interleave(tiny.group, 0))
    torch.testing.assert_close(t.pattern[:, [0, 1, 3, 4]].sum(-1), torch.ones(3, 4, dtype=torch.float64))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 10),
    heads=st.sampled_from([1, 2, 3, 4]),
    d_head=st.integers(1, 6),
    causal=st.booleans(),
    scaled=st.booleans(),
    seed=st.integers(0, 2**16),
    density=st.floats(0.0, 1.0),
)
def test_random_shapes_and_masks(n, heads, d_head, causal, scaled, seed, density) -> None:
    g = torch.Generator().manual_seed(seed)
    w = random_weights(d_model=heads * d_head, n_heads=heads, seed=seed, dtype=torch.float32)
    x = torch.randn(n, heads * d_head, generator=g) * 3
    allowed = torch.rand(n, n, generator=g) < density
    t = compute_trace(w, x, attn_mask=allowed, causal=causal, scaled=scaled, device="cpu")
    assert not torch.isnan(t.pattern).any() and not torch.isnan(t.output).any()
    effective = allowed & torch.ones(n, n, dtype=torch.bool).tril() if causal else allowed
    dead = ~effective.any(-1)
    assert t.dead_rows.tolist() == dead.tolist()
    sums = t.pattern.sum(-1)  # [h, n]
    torch.testing.assert_close(sums[:, ~dead], torch.ones(heads, int((~dead).sum())), atol=1e-5, rtol=0)
    torch.testing.assert_close(t.pattern[:, dead], torch.full_like(t.pattern[:, dead], 1.0 / n))
    assert torch.all(t.pattern[:, ~effective & ~dead[:, None]] == 0)


def test_bad_shapes_and_options_are_clear_errors(tiny: AttentionWeights) -> None:
    with pytest.raises(MhaVizError, match="x must be"):
        compute_trace(tiny, torch.zeros(4, 7))
    with pytest.raises(MhaVizError, match="W_K has shape"):
        AttentionWeights(W_Q=torch.zeros(2, 4, 2), W_K=torch.zeros(2, 4, 3), W_V=torch.zeros(2, 4, 2),
                         W_O=torch.zeros(2, 2, 4))  # fmt: skip
    with pytest.raises(MhaVizError, match="float32 or float64"):
        resolve_dtype("float16")
    with pytest.raises(MhaVizError, match="unknown device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(MhaVizError, match="not available"):
            resolve_device("cuda")
    assert resolve_device("auto").type in ("cuda", "mps", "cpu")


def test_grouped_query_matches_the_loop() -> None:
    g = torch.Generator().manual_seed(7)
    h, kv, d, dh = 6, 2, 12, 4
    w = AttentionWeights(
        W_Q=torch.randn(h, d, dh, generator=g, dtype=torch.float64),
        W_K=torch.randn(kv, d, dh, generator=g, dtype=torch.float64),
        W_V=torch.randn(kv, d, dh, generator=g, dtype=torch.float64),
        W_O=torch.randn(h, dh, d, generator=g, dtype=torch.float64),
        b_K=torch.randn(kv, dh, generator=g, dtype=torch.float64),
    )
    x = torch.randn(7, d, generator=g, dtype=torch.float64)
    allowed = torch.ones(7, 7, dtype=torch.bool).tril()
    pattern, output = loop_attention(w, x, allowed)
    t = compute_trace(w, x, causal=True, device="cpu", dtype="float64")
    assert t.k.shape == (2, 7, 4) and t.q.shape == (6, 7, 4) and t.group == 3
    torch.testing.assert_close(t.pattern, pattern, rtol=0, atol=1e-12)
    torch.testing.assert_close(t.output, output, rtol=0, atol=1e-12)
    # Query heads 0-2 share K/V head 0: with equal W_Q rows they would attend identically.
    same = AttentionWeights(W_Q=w.W_Q[:1].repeat(6, 1, 1), W_K=w.W_K, W_V=w.W_V, W_O=w.W_O)
    p = compute_trace(same, x, device="cpu", dtype="float64").pattern
    torch.testing.assert_close(p[0], p[2])
    torch.testing.assert_close(p[3], p[5])
    assert not torch.allclose(p[0], p[3])


def test_attend_soft_cap_bias_and_mask_in_the_model_order() -> None:
    """softcap · tanh(s·scale / softcap) + bias, masked, softmax: as Gemma 2 and T5 compute it."""
    from mha_viz.attention import attend

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    w_o = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
    bias = torch.randn(2, 5, 5, generator=g, dtype=torch.float64)
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    out = attend(q, k, v, w_o, scale=0.5, softcap=3.0, bias=bias, allowed=allowed)
    s = torch.tanh(q @ k.transpose(1, 2) * 0.5 / 3.0) * 3.0 + bias
    ref = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
    torch.testing.assert_close(out["pattern"], ref, rtol=0, atol=1e-12)
    concat = (ref @ v).transpose(0, 1).reshape(5, 8)
    torch.testing.assert_close(out["output"], concat @ w_o.reshape(8, 8), rtol=0, atol=1e-12)
    assert out["pattern"].abs().max() <= 1 and not out["dead_rows"].any()


@pytest.mark.parametrize("case", ["huge weights", "huge scale", "huge input"])
def test_overflow_is_a_clear_error_never_nan(case: str) -> None:
    w = random_weights(dtype=torch.float32)
    x = torch.randn(5, 12, generator=torch.Generator().manual_seed(1))
    if case == "huge weights":
        w = AttentionWeights(**{n: t * 1e30 for n, t in w.tensors().items()})
    elif case == "huge scale":
        w = AttentionWeights(**w.tensors(), scale=1e38)
    else:
        x = x * 1e25
    with pytest.raises(MhaVizError, match=r"overflowed float32.*use smaller weights/scale"):
        compute_trace(w, x, device="cpu")
    if case == "huge weights":  # float64 holds these scores: a real pattern, not an error
        t = compute_trace(w, x, device="cpu", dtype="float64")
        assert torch.isfinite(t.pattern).all() and torch.isfinite(t.output).all()

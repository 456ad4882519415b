"""Own-weights variants (mha_viz.own_variants): equivalences with MHA and hand-written loop implementations."""

from __future__ import annotations

import pytest
import torch

from mha_viz.attention import compute_trace
from mha_viz.own import init_weights
from mha_viz.own_variants import VariantSpec, composition, router, run_variant
from mha_viz.trace import MhaVizError

D, H, N = 24, 4, 6
DK = D // H


@pytest.fixture(scope="module")
def setup() -> tuple:
    w = init_weights(D, H, seed=3, bias=True)
    gen = torch.Generator().manual_seed(5)
    w.b_Q.normal_(generator=gen)  # non-zero biases, so they are tested too
    w.b_K.normal_(generator=gen)
    w.b_V.normal_(generator=gen)
    w.b_O.normal_(generator=gen)
    x = torch.randn(N, D, generator=gen)  # [n, d]
    return w, x


def _loop_head(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """One head's softmax pattern by rows, by hand. Shapes: q, k [n, e]; returns [n, n]."""
    n = q.shape[0]
    rows = []
    for t in range(n):
        s = [float(q[t] @ k[u]) * scale if (not causal or u <= t) else float("-inf") for u in range(n)]
        rows.append(torch.softmax(torch.tensor(s, dtype=torch.float64), dim=0))
    return torch.stack(rows).to(q.dtype)


def _mha_loop(w, x, causal=False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Per-head contributions z_i · W^O_i, by a loop. Returns patterns [h, n, n] and the list of [n, d]."""
    pats, contrib = [], []
    for i in range(H):
        q, k, v = x @ w.W_Q[i] + w.b_Q[i], x @ w.W_K[i] + w.b_K[i], x @ w.W_V[i] + w.b_V[i]
        p = _loop_head(q, k, DK**-0.5, causal)
        pats.append(p)
        contrib.append(p @ v @ w.W_O[i])
    return torch.stack(pats), contrib


@pytest.mark.parametrize("causal", [False, True])
def test_mha_matches_compute_trace(setup, causal) -> None:
    w, x = setup
    res = run_variant(w, x, VariantSpec("mha"), causal=causal)
    ref = compute_trace(w, x, causal=causal, device="cpu")
    torch.testing.assert_close(res.pattern, ref.pattern, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(res.output, ref.output, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "spec",
    [
        VariantSpec("gqa", groups=H),
        VariantSpec("mohsa", width=0),
        VariantSpec("moh", top_k=H, gates="equal"),
        VariantSpec("dcmha", rank=0),
    ],
    ids=["gqa g=h", "mohsa w=0", "moh k=h equal", "dcmha rank 0"],
)
def test_equivalences_with_mha(setup, spec) -> None:
    w, x = setup
    ref = run_variant(w, x, VariantSpec("mha"))
    res = run_variant(w, x, spec)
    torch.testing.assert_close(res.pattern, ref.pattern, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(res.output, ref.output, atol=1e-5, rtol=1e-5)


def test_dcmha_identity_composition_is_mha(setup) -> None:
    w, x = setup
    zero = (torch.zeros(H, 2), torch.zeros(2, H))  # I + W1 W2 = I
    from mha_viz.own_variants import dcmha, mha

    torch.testing.assert_close(dcmha(w, x, 2, mixes=(zero, zero)).output, mha(w, x).output, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(dcmha(w, x, 2).output, mha(w, x).output, atol=1e-3)  # a real composition differs


def test_moh_all_heads_router_gates_is_mha_with_token_head_weights(setup) -> None:
    """k = h, router gates: output_t = Σ_i g_{t,i} · (head i's MHA contribution)_t + b_O (gate per token and head)."""
    w, x = setup
    res = run_variant(w, x, VariantSpec("moh", top_k=H, gates="router", seed=9))
    _, contrib = _mha_loop(w, x)
    g = torch.softmax(x @ router(D, H, 9), dim=-1)  # [n, h]
    expected = sum(g[:, i : i + 1] * contrib[i] for i in range(H)) + w.b_O
    torch.testing.assert_close(res.output, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(res.output, run_variant(w, x, VariantSpec("mha")).output, atol=1e-3)


def test_gqa_against_loop(setup) -> None:
    w, x = setup
    g = 2
    res = run_variant(w, x, VariantSpec("gqa", groups=g), causal=True)
    out = w.b_O.clone()
    for i in range(H):
        grp = range((i // (H // g)) * (H // g), (i // (H // g) + 1) * (H // g))  # the heads pooled with i
        wk = sum(w.W_K[j] for j in grp) / len(grp)
        wv = sum(w.W_V[j] for j in grp) / len(grp)
        bk = sum(w.b_K[j] for j in grp) / len(grp)
        bv = sum(w.b_V[j] for j in grp) / len(grp)
        q, k, v = x @ w.W_Q[i] + w.b_Q[i], x @ wk + bk, x @ wv + bv
        p = _loop_head(q, k, DK**-0.5, True)
        torch.testing.assert_close(res.pattern[i], p, atol=1e-6, rtol=1e-5)
        out = out + p @ v @ w.W_O[i]
    torch.testing.assert_close(res.output, out, atol=1e-5, rtol=1e-5)
    assert tuple(res.extras["K groups"].shape) == (N, g, DK)
    mqa = run_variant(w, x, VariantSpec("mqa"))
    assert tuple(mqa.extras["V groups"].shape) == (N, 1, DK)


def test_mohsa_against_loop(setup) -> None:
    w, x = setup
    width = 2
    res = run_variant(w, x, VariantSpec("mohsa", width=width))
    full = {m: x @ getattr(w, f"W_{m}").permute(1, 0, 2).reshape(D, D) + getattr(w, f"b_{m}").reshape(D) for m in "QKV"}
    wo = w.W_O.reshape(D, D)
    out = w.b_O.clone()
    for i in range(H):
        cols = [c % D for c in range(i * DK - width, (i + 1) * DK + width)]  # wrapped around d_model
        q, k, v = full["Q"][:, cols], full["K"][:, cols], full["V"][:, cols]
        p = _loop_head(q, k, (DK + 2 * width) ** -0.5, False)
        torch.testing.assert_close(res.pattern[i], p, atol=1e-6, rtol=1e-5)
        out = out + p @ v @ wo[cols]
    torch.testing.assert_close(res.output, out, atol=1e-5, rtol=1e-5)


def test_moh_top_k_against_loop(setup) -> None:
    w, x = setup
    k = 2
    res = run_variant(w, x, VariantSpec("moh", top_k=k, seed=4))
    _, contrib = _mha_loop(w, x)
    w_r = router(D, H, 4)
    out = torch.zeros(N, D)
    for t in range(N):
        scores = torch.softmax(x[t] @ w_r, dim=0)  # [h]
        best = sorted(range(H), key=lambda i: -float(scores[i]))[:k]
        for i in best:
            out[t] += float(scores[i]) * contrib[i][t]
        assert (res.extras["gates"][t] > 0).sum() == k
    torch.testing.assert_close(res.output, out + w.b_O, atol=1e-5, rtol=1e-5)


def test_dcmha_against_loop(setup) -> None:
    w, x = setup
    r = 2
    res = run_variant(w, x, VariantSpec("dcmha", rank=r, seed=1), causal=True)
    (a1, a2), (b1, b2) = composition(H, r, 1), composition(H, r, 2)
    m_pre, m_post = a1 @ a2, b1 @ b2  # [h, h]
    raw = [(x @ w.W_Q[i] + w.b_Q[i]) @ (x @ w.W_K[i] + w.b_K[i]).T * DK**-0.5 for i in range(H)]
    out = w.b_O.clone()
    probs = []
    for j in range(H):
        s = raw[j] + sum(raw[i] * m_pre[i, j] for i in range(H))
        s = s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
        probs.append(torch.softmax(s, dim=-1))
    for j in range(H):
        p = probs[j] + sum(probs[i] * m_post[i, j] for i in range(H))
        torch.testing.assert_close(res.pattern[j], p, atol=1e-6, rtol=1e-5)
        out = out + p @ (x @ w.W_V[j] + w.b_V[j]) @ w.W_O[j]
    torch.testing.assert_close(res.output, out, atol=1e-5, rtol=1e-5)
    assert tuple(res.extras["pre-softmax mixing"].shape) == (H, H)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (VariantSpec("gqa", groups=3), "choose one of 1, 2, 4"),
        (VariantSpec("mohsa", width=99), "between 0 and 9"),
        (VariantSpec("moh", top_k=5), "between 1 and 4"),
        (VariantSpec("dcmha", rank=-1), "between 0 and 4"),
        (VariantSpec("nope"), "unknown variant"),
    ],
)
def test_bad_settings_are_clear_errors(setup, spec, words) -> None:
    w, x = setup
    with pytest.raises(MhaVizError, match=words):
        run_variant(w, x, spec)


# --- the dashboard: the sidebar's variant (from the link) adds its steps to Step by step and the Lesson -----------
@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"ovar": "GQA (grouped K/V)", "ovar_g": "2"}, ("K group 0 of 2", "[6 × 16]")),
        ({"ovar": "MQA (one K/V head)"}, ("K group 0 of 1", "V group 0 of 1")),
        (
            {"ovar": "MOHSA (overlapping heads)", "ovar_w": "3"},
            (
                "columns each head reads",
                "head 0's attention weights in this layer   [6 × 6]",
                "head_0 = weights · V   [6 × 22]",
            ),
        ),
        ({"ovar": "MoH (routed heads)", "ovar_k": "2"}, ("router scores", "gates")),
        ({"ovar": "DCMHA (composed heads, static)", "ovar_r": "1"}, ("pre-softmax mixing", "[4 × 4]")),
    ],
)
def test_step_by_step_shows_the_variant_steps(minilm, params, expected) -> None:
    from apptest_helpers import assert_clean, panels, run_app

    at = run_app(src="Own weights", own_heads="4", d_model="64", view="Step by step", text="a b c d", **params)
    assert_clean(at)
    titles = [title for title, _ in panels(at)]
    for words in expected:
        assert any(words in t for t in titles), (words, titles)
    assert any("output − MHA's output" in t for t in titles)


def test_lesson_and_bad_group_count(minilm) -> None:
    from apptest_helpers import assert_clean, panels, run_app

    at = run_app(src="Own weights", own_heads="4", d_model="64", view="Lesson", ovar="MoH (routed heads)")
    assert_clean(at)
    assert any("router scores" in title for title, _ in panels(at))
    at = run_app(src="Own weights", own_heads="4", d_model="64", view="Step by step", ovar="GQA (grouped K/V)",
                 ovar_g="3")  # fmt: skip
    assert not at.exception and any("choose one of 1, 2, 4" in e.value for e in at.error)

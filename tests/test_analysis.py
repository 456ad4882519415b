"""Numbers about patterns, on hand-built fixtures with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz.analysis import (
    align_tokens,
    drop_special,
    focus_shift,
    head_distances,
    head_roles,
    head_stats,
    is_punctuation,
    output_change,
    rollout,
    row_entropy,
    similarity_order,
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
    assert r["punct"][4] == pytest.approx(1 / n) and r["entropy"][4] == pytest.approx(np.log(n))
    assert list(r["label"]) == ["previous token", "next token", "self", "[SEP] sink", "broad"]


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
    from mha_viz.pipeline import record
    from mha_viz.studies import all_patterns, roles_table

    rec = record(minilm, "The animal didn't cross the street because it was too tired.")
    rows = roles_table(rec.tokens, all_patterns(minilm, rec, None, Config()))
    assert len(rows) == 72 and {"layer", "head", "prev", "next", "self", "special", "punct", "entropy", "label"} <= set(
        rows[0]
    )
    best = max(rows, key=lambda r: r["prev"])
    assert best["label"] == "previous token" and best["prev"] > 0.9  # MiniLM has a previous-token head
    assert any(r["label"].endswith("sink") for r in rows)

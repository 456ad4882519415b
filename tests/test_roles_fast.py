"""head_roles computes head by head (no [h, n, n] float64 temporaries): its scores equal a plain whole-stack
computation of the rules (the reference below, written straight from ROLE_RULES) on random, causal and
repeated-token patterns."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz.analysis.patterns import EPS
from mha_viz.analysis.roles import SCORE_KEYS, head_roles, repeat_masks


def row_entropy(p: np.ndarray) -> np.ndarray:
    """Row entropy in nats, written plainly (clipped log)."""
    return -(p * np.log(np.clip(p, EPS, None))).sum(-1)


def reference_scores(p: np.ndarray, sp: np.ndarray, pu: np.ndarray, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Every score of ROLE_RULES on the whole [h, n, n] stack at once, with key masks."""
    p = p.astype(np.float64)
    h, n, _ = p.shape
    dup_mask, ind_mask = repeat_masks(ids, n)
    scores = {k: np.zeros(h) for k in SCORE_KEYS}
    scores["entropy"] = row_entropy(p).mean(-1)
    rows = np.arange(1, n)
    q = p[:, 1:, :].copy()
    scores["first"] = q[:, :, 0].mean(-1)
    q[:, :, 0] = 0.0
    mass = q.sum(-1)
    causal = not np.triu(p, 1).any()
    seen = rows if causal else np.full(n - 1, n - 1)
    choice = seen >= 2

    def share(keys: np.ndarray, eligible: np.ndarray | None = None) -> np.ndarray:
        elig = (keys.any(-1) if eligible is None else eligible) & choice
        num = (q * keys[None]).sum(-1)[:, elig].sum(-1)
        den = mass[:, elig].sum(-1)
        return np.divide(num, den, out=np.zeros(h), where=den > EPS)

    i, j = np.meshgrid(rows, np.arange(n), indexing="ij")
    everyone = np.ones(n - 1, dtype=bool)
    scores["prev"] = share((j == i - 1) & (j >= 1))
    scores["next"] = share(j == i + 1)
    scores["self"] = share(j == i)
    scores["special"] = share(np.broadcast_to(sp & (np.arange(n) >= 1), (n - 1, n)), everyone)
    scores["punct"] = share(np.broadcast_to(pu & (np.arange(n) >= 1), (n - 1, n)), everyone)
    scores["dup"] = share(dup_mask[1:])
    scores["induction"] = share(ind_mask[1:])
    r = np.divide(q, mass[..., None], out=np.zeros_like(q), where=mass[..., None] > EPS)
    h_norm = row_entropy(r) / np.log(np.maximum(seen, 2))
    den = mass[:, choice].sum(-1)
    scores["spread"] = np.divide((mass * h_norm)[:, choice].sum(-1), den, out=np.zeros(h), where=den > EPS)
    return scores


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [2, 3, 40])
def test_head_by_head_scores_equal_the_whole_stack_rules(causal: bool, n: int) -> None:
    rng = np.random.default_rng(n + causal)
    logits = rng.normal(size=(6, n, n)) * 3
    if causal:
        logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True)).astype(np.float32)  # [h, n, n] as a trace's pattern
    p[1, :, 0] += 2.0  # a sink head (rows renormalised)
    p[1] /= p[1].sum(-1, keepdims=True)
    ids = rng.integers(0, 5, size=n)  # few distinct ids: many repeats
    sp = np.zeros(n, bool)
    sp[0] = sp[-1] = True
    pu = rng.random(n) < 0.3
    got = head_roles(p, sp, pu, ["<s>", "</s>"], ids)
    want = reference_scores(p, sp, pu, ids)
    for key in SCORE_KEYS:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-9, atol=1e-12, err_msg=key)
    assert len(got["label"]) == 6

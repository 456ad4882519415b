"""KV cache policies (analysis/kv_policies.py) against independent implementations written here from each paper's
pseudocode (torch, one head at a time; kvpress does not install beside this project's transformers: it pins
transformers<5.3), and their budgets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz.analysis import kv_policies as kvp
from mha_viz.trace import MhaVizError

L, H, KV, P = 3, 6, 3, 80


def _stats(seed: int, n: int = P, window: int = 32) -> tuple[kvp.PrefillStats, torch.Tensor]:
    """Stats from a random causal attention pattern [L, H, n, n] (rows softmax over keys ≤ the query)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(L, H, n, n, generator=g, dtype=torch.float64) * 2
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    a = scores.softmax(-1)  # [L, H, n, n]
    stats = kvp.PrefillStats(
        acc=a.sum(2).numpy(), obs=a[:, :, n - window :].sum(2).numpy(), last=a[:, :, -1].numpy(), kv=KV, window=window
    )
    return stats, a


def _group(x: torch.Tensor) -> torch.Tensor:
    """[L, H, n] -> [L, KV, n]: the mean over each K/V head's query heads (h // (H / KV))."""
    return torch.stack([x[:, [h for h in range(H) if h // (H // KV) == j]].mean(1) for j in range(KV)], 1)


def _ref_streaming(n: int, b: int, sinks: int = 4) -> set[int]:
    return set(range(min(sinks, b))) | set(range(n - (b - min(sinks, b)), n))


def _ref_h2o(acc: torch.Tensor, b: int) -> set[int]:  # one head's accumulated attention [n]
    n = acc.shape[0]
    recent = set(range(n - b // 2, n))
    rest = sorted((i for i in range(n) if i not in recent), key=lambda i: -float(acc[i]))
    return recent | set(rest[: b - b // 2])


def _ref_snapkv_scores(obs: torch.Tensor, window: int) -> torch.Tensor:  # [KV, n] -> [KV, n] (SnapKV's code)
    pooled = torch.nn.functional.avg_pool1d(obs[:, None, :-window], kernel_size=5, padding=2, stride=1)[:, 0]
    return torch.cat([pooled, torch.full((obs.shape[0], window), float("inf"), dtype=obs.dtype)], 1)


def _ref_snapkv(obs: torch.Tensor, b: int, window: int) -> set[int]:  # one head's window votes [n]
    n = obs.shape[0]
    if b <= window:
        return set(range(n - b, n))
    pooled = torch.nn.functional.avg_pool1d(obs[None, None, : n - window], kernel_size=5, padding=2, stride=1)[0, 0]
    return set(torch.topk(pooled, b - window).indices.tolist()) | set(range(n - window, n))


def _ref_ada(obs_kv: torch.Tensor, b: int, window: int, alpha: float = 0.2) -> list[set[int]]:  # [KV, n]
    scores = _ref_snapkv_scores(obs_kv, window)
    kv, n = scores.shape

    def rank(j: int, i: int) -> tuple[float, int]:  # best first; in the window (inf) the most recent first
        return (-float(scores[j, i]), -i if i >= n - window else i)

    kept = [set(sorted(range(n), key=lambda i, j=j: rank(j, i))[: int(alpha * b)]) for j in range(kv)]
    rest = sorted((rank(j, i), j * n + i) for j in range(kv) for i in range(n) if i not in kept[j])
    for _, flat in rest[: b * kv - kv * int(alpha * b)]:
        kept[flat // n].add(flat % n)
    return kept


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("budget", [0.1, 0.25, 0.5, 0.9])
def test_each_policy_equals_its_reference(seed: int, budget: float) -> None:
    stats, a = _stats(seed)
    b = kvp.tokens_of(budget, P)
    acc, obs = _group(a.sum(2)), _group(a[:, :, P - 32 :].sum(2))  # [L, KV, P]
    tova_scores = a[:, :, -1].mean(1)  # [L, P]: the last token's weights averaged over the layer's heads
    masks = {p: kvp.keep_mask(p, stats, budget) for p in kvp.POLICIES}
    for la in range(L):
        ada = _ref_ada(obs[la], b, 32)
        for j in range(KV):
            got = {p: set(np.flatnonzero(m[la, j]).tolist()) for p, m in masks.items()}
            assert got["streaming"] == _ref_streaming(P, b)
            assert got["h2o"] == _ref_h2o(acc[la, j], b)
            assert got["snapkv"] == _ref_snapkv(obs[la, j], b, 32)
            assert got["tova"] == set(torch.topk(tova_scores[la], b).indices.tolist())
            assert got["adakv"] == ada[j]


def test_duo_attention_gives_the_best_retrieval_heads_everything() -> None:
    stats, a = _stats(2)
    b = kvp.tokens_of(0.9, P)  # 72 tokens: streaming heads keep 64, so a few heads can keep all 80
    far = torch.ones(P, dtype=torch.bool)
    far[:4], far[P - 60 :] = False, False  # a streaming head's 64 tokens: 4 sinks and 60 recent
    obs = _group(a[:, :, P - 32 :].sum(2))  # [L, KV, P]
    share = (obs[..., far].sum(-1) / obs.sum(-1)).flatten()  # [L·KV]
    n_full = int(L * KV * (b - 64) // (P - 64))
    full = set(torch.sort(share, descending=True, stable=True).indices[:n_full].tolist())
    mask = kvp.keep_mask("duo", stats, 0.9).reshape(L * KV, P)
    for i in range(L * KV):
        assert set(np.flatnonzero(mask[i]).tolist()) == (set(range(P)) if i in full else _ref_streaming(P, 64))
    given = np.zeros((L, KV))
    given[1, 2] = 1.0  # a retrieval score from elsewhere (issue U's) decides which heads keep all
    chosen = kvp.duo_attention(stats, P - 2, retrieval=given).reshape(L * KV, P).all(-1)
    assert chosen[1 * KV + 2] and n_full == 4


@pytest.mark.parametrize("policy", list(kvp.POLICIES))
def test_budgets_are_kept_and_a_whole_budget_keeps_everything(policy: str) -> None:
    stats, _ = _stats(3)
    for budget in (1, 2, 5, 0.1, 0.33, 0.5, 0.99, 79):
        b = kvp.tokens_of(budget, P)
        mask = kvp.keep_mask(policy, stats, budget)
        assert mask.shape == (L, KV, P) and mask.dtype == bool
        if policy == "duo":
            assert mask.sum() <= b * L * KV
        elif policy == "adakv":
            assert (mask.sum((1, 2)) == b * KV).all()
        else:
            assert (mask.sum(-1) == b).all()
    for whole in (1.0, P, P + 10):
        assert kvp.keep_mask(policy, stats, whole).all()
    short, _ = _stats(4, n=20, window=20)  # a prefix no longer than SnapKV's window: the most recent tokens
    assert (kvp.keep_mask(policy, short, 5).sum(-1) <= 5).all()
    if policy == "snapkv":
        assert kvp.keep_mask(policy, short, 5)[..., 15:].all()


def test_bad_budgets_and_policies_are_refused() -> None:
    stats, _ = _stats(0)
    for bad in (0, -0.5, float("nan")):
        with pytest.raises(MhaVizError, match="budget"):
            kvp.keep_mask("h2o", stats, bad)
    with pytest.raises(MhaVizError, match="unknown cache policy"):
        kvp.keep_mask("lru", stats, 0.5)

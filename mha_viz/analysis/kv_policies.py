"""Which keys a compressed KV cache keeps, per layer and K/V head: six published eviction policies as pure functions.

Every policy reads what one prefill of the cached text (the prefix) gave, collected in ``PrefillStats`` (per layer and
query head, the model's own attention weights), and returns a bool keep mask [L, kv, P]: True for the keys the cache
keeps. Budgets are per K/V head (the cache stores keys and values per K/V head, so the query heads of a group read the
same kept keys; kvpress works the same way): ``budget`` tokens each, and for the head-wise policies (Ada-KV,
DuoAttention) the same total per layer (Ada-KV) or model (DuoAttention). A budget ≥ P keeps everything.
Scores per K/V head are the mean over its query heads (query head h reads K/V head h // (H / kv), as transformers).
Ties go to the earlier position. numpy only: no model here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mha_viz.config import KV_OBS_WINDOW, KV_POOL_KERNEL, KV_SAFEGUARD, KV_SINKS, KV_STREAM_HEAD
from mha_viz.errors import MhaVizError


@dataclass(frozen=True, eq=False)
class PrefillStats:
    """What the policies read from the prefill of the prefix (P tokens). Shapes: acc, obs, last [L, H, P]: per
    layer and query head the attention each prefix key got summed over every prefix query (acc), summed over the
    last ``window`` prefix queries (obs), and from the last prefix query (last); kv: the K/V head count."""

    acc: np.ndarray
    obs: np.ndarray
    last: np.ndarray
    kv: int
    window: int = KV_OBS_WINDOW

    @property
    def n(self) -> int:
        return int(self.acc.shape[-1])


def per_kv(x: np.ndarray, kv: int) -> np.ndarray:
    """Query-head scores averaged over each K/V head's group. Shapes: [..., H, P] -> [..., kv, P]."""
    h = x.shape[-2]
    return x.reshape(*x.shape[:-2], kv, h // kv, x.shape[-1]).mean(-2)


def tokens_of(budget: float, n: int) -> int:
    """A budget as tokens per head: a ratio in (0, 1] of the prefix's ``n`` tokens (rounded, at least 1), or a
    token count > 1 (at most n)."""
    if not np.isfinite(budget) or budget <= 0:
        raise MhaVizError(f"a cache budget is a ratio in (0, 1] or a token count ≥ 1, not {budget}")
    tokens = round(budget * n) if budget <= 1 else int(budget)
    return int(min(n, max(1, tokens)))


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """Keep mask of the ``k`` largest scores along the last axis (ties: earlier first). Shapes: [..., P] -> same."""
    keep = np.zeros(scores.shape, dtype=bool)
    if k <= 0:
        return keep
    order = np.argsort(-scores, axis=-1, kind="stable")[..., :k]
    np.put_along_axis(keep, order, True, axis=-1)
    return keep


def streaming_llm(stats: PrefillStats, budget: int, sinks: int = KV_SINKS) -> np.ndarray:
    """StreamingLLM (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks", 2309.17453).
    Rule: every head keeps the first ``sinks`` tokens (the attention sinks) and the ``budget - sinks`` most recent
    ones. Returns [L, kv, P]."""
    n, s = stats.n, min(sinks, budget)
    keep = np.zeros(n, dtype=bool)
    keep[:s] = True
    keep[n - (budget - s) :] = True
    return np.broadcast_to(keep, (stats.acc.shape[0], stats.kv, n)).copy()


def h2o(stats: PrefillStats, budget: int) -> np.ndarray:
    """H2O (Zhang et al. 2023, "H2O: Heavy-Hitter Oracle", 2306.14048). Rule: half the budget (rounded down) to the
    most recent tokens, the rest to the heavy hitters: the other tokens with the largest accumulated attention (the
    sum over every prefill query of its weight on the token), per head. Returns [L, kv, P]."""
    n, recent = stats.n, budget // 2
    score = per_kv(stats.acc, stats.kv).copy()  # [L, kv, P]
    keep = np.zeros(score.shape, dtype=bool)
    keep[..., n - recent :] = recent > 0
    score[..., n - recent :] = -np.inf
    return keep | top(score, budget - recent)


def snapkv_scores(stats: PrefillStats, kernel: int = KV_POOL_KERNEL) -> np.ndarray:
    """SnapKV's votes: the attention the observation window's queries (the last ``window`` prefix tokens) give each
    key before the window, summed over the window, averaged over the K/V head's query heads, then average-pooled along
    those keys (kernel ``kernel``, zero padding counted, as SnapKV's avg_pool1d); the window's own keys rank above
    all, the most recent first.
    Shapes: returns [L, kv, P]."""
    w = min(stats.window, stats.n)
    votes = per_kv(stats.obs, stats.kv)[..., : stats.n - w]  # [L, kv, P - w]: the keys before the window
    pad = kernel // 2
    padded = np.pad(votes, [(0, 0), (0, 0), (pad, pad + kernel)])  # room for the window view when P - w is tiny
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=-1)  # [L, kv, P - w + kernel + 1, kernel]
    pooled = windows[..., : votes.shape[-1], :].sum(-1) / kernel  # [L, kv, P - w]
    recent = w + 1.0 + np.arange(w) / w  # above any pooled vote (≤ w): the window first, its most recent first
    return np.concatenate([pooled, np.broadcast_to(recent, (*pooled.shape[:2], w))], -1)  # [L, kv, P]


def snapkv(stats: PrefillStats, budget: int, kernel: int = KV_POOL_KERNEL) -> np.ndarray:
    """SnapKV (Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation", 2404.14469). Rule:
    the observation window (the last ``window`` prefix tokens) is kept; the rest of the budget goes to the tokens
    with the most pooled votes (snapkv_scores), per head. A budget below the window keeps its most recent tokens.
    Returns [L, kv, P]."""
    return top(snapkv_scores(stats, kernel), budget)


def tova(stats: PrefillStats, budget: int) -> np.ndarray:
    """TOVA (Oren et al. 2024, "Transformers are Multi-State RNNs", 2401.06104), applied once after the prefill (as
    kvpress does). Rule: keep the ``budget`` tokens with the largest attention from the last token, averaged over
    all the layer's heads: one set per layer, the same for every head. Returns [L, kv, P]."""
    score = stats.last.mean(1)  # [L, P]
    return np.repeat(top(score, budget)[:, None, :], stats.kv, axis=1)


def ada_kv(stats: PrefillStats, budget: int, alpha: float = KV_SAFEGUARD) -> np.ndarray:
    """Ada-KV (Feng et al. 2024, "Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget Allocation", 2407.11550)
    on SnapKV's scores (Ada-SnapKV), with kvpress's safeguard. Rule: the layer's total is ``budget`` × kv; each
    head first gets its floor(alpha × budget) best tokens, then the rest of the total goes to the best remaining
    (head, token) scores over all the layer's heads: head-wise budgets, the same total. Returns [L, kv, P]."""
    score = snapkv_scores(stats)  # [L, kv, P]
    L, kv, n = score.shape
    keep = top(score, int(alpha * budget))
    rest = np.where(keep, -np.inf, score).reshape(L, kv * n)
    extra = top(rest, budget * kv - int(keep[0].sum()))
    return keep | extra.reshape(L, kv, n)


def retrieval_proxy(stats: PrefillStats, stream: int = KV_STREAM_HEAD, sinks: int = KV_SINKS) -> np.ndarray:
    """A head's retrieval score (this project's proxy for DuoAttention's trained gates): the share of the
    observation window's attention that falls outside a streaming head's sinks and recent window (``stream``
    tokens), averaged over the K/V head's query heads. Shapes: returns [L, kv]."""
    votes = per_kv(stats.obs, stats.kv)  # [L, kv, P]
    far = ~streaming_llm(stats, min(stream, stats.n), sinks)[0, 0]  # [P]
    total = votes.sum(-1)
    return np.divide(votes[..., far].sum(-1), total, out=np.zeros_like(total), where=total > 0)


def duo_attention(
    stats: PrefillStats, budget: int, retrieval: np.ndarray | None = None, stream: int = KV_STREAM_HEAD,
    sinks: int = KV_SINKS,
) -> np.ndarray:  # fmt: skip
    """DuoAttention-style (Xiao et al. 2024, "DuoAttention: Efficient Long-Context LLM Inference with Retrieval and
    Streaming Heads", 2410.10819). Rule: the heads with the highest retrieval score over the whole model
    (``retrieval`` [L, kv], or retrieval_proxy) keep every token; the others keep ``sinks`` sinks and a recent
    window, min(stream, budget) tokens in all; as many retrieval heads as the model's total (budget × L × kv)
    allows. Returns [L, kv, P]."""
    n, L, kv = stats.n, stats.acc.shape[0], stats.kv
    score = retrieval_proxy(stats, stream, sinks) if retrieval is None else np.asarray(retrieval, dtype=float)
    if score.shape != (L, kv):
        raise MhaVizError(f"retrieval scores are one per layer and K/V head ({L} × {kv}), not {score.shape}")
    small = min(stream, budget)
    n_retrieval = L * kv if small >= n else int(L * kv * (budget - small) // (n - small))
    keep = streaming_llm(stats, small, sinks)
    chosen = np.argsort(-score.ravel(), kind="stable")[:n_retrieval]
    keep.reshape(L * kv, n)[chosen] = True
    return keep


POLICIES = {
    "streaming": streaming_llm,
    "h2o": h2o,
    "snapkv": snapkv,
    "tova": tova,
    "adakv": ada_kv,
    "duo": duo_attention,
}
POLICY_NAMES = {
    "streaming": "StreamingLLM (sinks + window)",
    "h2o": "H2O (heavy hitters + recent)",
    "snapkv": "SnapKV (window votes, pooled)",
    "tova": "TOVA (last token's attention)",
    "adakv": "Ada-KV (head-wise budgets, SnapKV scores)",
    "duo": "DuoAttention-style (retrieval heads keep all)",
}


def keep_mask(policy: str, stats: PrefillStats, budget: float) -> np.ndarray:
    """The keep mask of ``policy`` (a POLICIES key) at ``budget`` (ratio or tokens, tokens_of). Returns
    [L, kv, P] bool."""
    if policy not in POLICIES:
        raise MhaVizError(f"unknown cache policy {policy!r}; choose one of {', '.join(POLICIES)}")
    tokens = tokens_of(budget, stats.n)
    if tokens >= stats.n:
        return np.ones((stats.acc.shape[0], stats.kv, stats.n), dtype=bool)
    return POLICIES[policy](stats, tokens)

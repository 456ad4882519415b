"""Numbers about attention patterns and outputs (numpy in, numpy out; nothing is drawn here).

Shapes: a pattern stack is [n_heads, query_pos, key_pos] with rows summing to 1 (or all zero for a
fully masked row).
"""

from __future__ import annotations

import numpy as np

EPS = 1e-12


def row_entropy(pattern: np.ndarray) -> np.ndarray:
    """Entropy of each attention row in nats (0 = all weight on one key; ln(n) = uniform).

    Shapes: pattern [..., q, k] -> [..., q].
    """
    p = np.asarray(pattern, dtype=np.float64)
    return -(p * np.log(np.clip(p, EPS, None))).sum(-1)


def head_stats(pattern: np.ndarray) -> dict[str, np.ndarray]:
    """Per-head summaries. Shapes: pattern [h, q, k] -> each value [h].

    entropy: mean row entropy (nats); max_weight: mean of each row's largest weight;
    self: mean weight a token puts on itself (the diagonal).
    """
    p = np.asarray(pattern, dtype=np.float64)
    n = min(p.shape[-2], p.shape[-1])
    return {
        "entropy": row_entropy(p).mean(-1),
        "max_weight": p.max(-1).mean(-1),
        "self": np.diagonal(p[..., :n, :n], axis1=-2, axis2=-1).mean(-1),
    }


def js_distance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen–Shannon distance between matching rows (base 2: 0 = identical, 1 = disjoint).

    Shapes: p, q [..., k] -> [...].
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> np.ndarray:
        return (a * (np.log2(np.clip(a, EPS, None)) - np.log2(np.clip(m, EPS, None)))).sum(-1)

    return np.sqrt(np.clip(0.5 * kl(p) + 0.5 * kl(q), 0.0, 1.0))


def head_distances(pattern: np.ndarray) -> np.ndarray:
    """Mean Jensen–Shannon distance over query rows between every pair of heads.

    Shapes: pattern [h, q, k] -> [h, h] (symmetric, zero diagonal).
    """
    p = np.asarray(pattern, dtype=np.float64)
    d = js_distance(p[:, None], p[None, :]).mean(-1)  # [h, h]
    np.fill_diagonal(d, 0.0)
    return 0.5 * (d + d.T)


def similarity_order(dist: np.ndarray) -> list[int]:
    """An order of the heads in which similar heads sit together (greedy nearest-neighbour chain).

    Starts from the most isolated head and repeatedly appends the closest head not yet placed.
    Shapes: dist [h, h].
    """
    h = int(dist.shape[0])
    if h == 0:
        return []
    order = [int(np.argmax(dist.sum(1)))]
    left = set(range(h)) - set(order)
    while left:
        last = order[-1]
        nxt = min(left, key=lambda j: (dist[last, j], j))
        order.append(nxt)
        left.remove(nxt)
    return order


def drop_special(pattern: np.ndarray, special: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Remove special tokens' rows and columns and renormalise each row to sum to 1.

    Rows whose remaining weight is zero stay all-zero. Shapes: pattern [h, n, n]; special [n] bool;
    returns (pattern [h, m, m], kept indices [m]).
    """
    keep = np.flatnonzero(~np.asarray(special, dtype=bool))
    sub = np.asarray(pattern)[:, keep][:, :, keep]
    total = sub.sum(-1, keepdims=True)
    out = np.divide(sub, total, out=np.zeros_like(sub), where=total > 0)
    return out.astype(np.asarray(pattern).dtype, copy=False), keep


def output_change(reference: np.ndarray, changed: np.ndarray) -> dict[str, np.ndarray]:
    """How much each token's output moved. Shapes: [n, d] both -> each value [n].

    relative: |changed - reference| / |reference|; cosine: cosine similarity of the two outputs.
    """
    ref = np.asarray(reference, dtype=np.float64)
    new = np.asarray(changed, dtype=np.float64)
    ref_norm = np.linalg.norm(ref, axis=-1)
    new_norm = np.linalg.norm(new, axis=-1)
    rel = np.linalg.norm(new - ref, axis=-1) / np.maximum(ref_norm, EPS)
    cos = (ref * new).sum(-1) / np.maximum(ref_norm * new_norm, EPS)
    return {"relative": rel, "cosine": cos}


def contribution_norms(head_out: np.ndarray) -> np.ndarray:
    """L2 norm of each head's contribution after W^O. Shapes: [h, n, d] -> [h, n]."""
    return np.linalg.norm(np.asarray(head_out, dtype=np.float64), axis=-1)

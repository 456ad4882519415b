"""Numbers about attention patterns and outputs (numpy in, numpy out; nothing is drawn here).

Shapes: a pattern stack is [n_heads, query_pos, key_pos] with rows summing to 1 (or all zero for a
fully masked row).
"""

from __future__ import annotations

import numpy as np
import torch

EPS = 1e-12


def row_entropy(pattern: np.ndarray) -> np.ndarray:
    """Entropy of each attention row in nats (0 = all weight on one key; ln(n) = uniform).

    Shapes: pattern [..., q, k] -> [..., q].
    """
    p = torch.as_tensor(np.asarray(pattern)).to(torch.float64, copy=True)  # our copy: edited in place
    return torch.special.entr(p.clamp_(min=0.0), out=p).sum(-1).numpy()  # -p ln p per cell (0 at 0), one pass


def head_stats(pattern: np.ndarray) -> dict[str, np.ndarray]:
    """Per-head summaries. Shapes: pattern [h, q, k] -> each value [h].

    entropy: mean row entropy (nats); max_weight: mean of each row's largest weight;
    self: mean weight a token puts on itself (the diagonal).
    """
    p = np.asarray(pattern)
    n = min(p.shape[-2], p.shape[-1])
    return {
        "entropy": row_entropy(p).mean(-1),
        "max_weight": p.max(-1).mean(-1, dtype=np.float64),
        "self": np.diagonal(p[..., :n, :n], axis1=-2, axis2=-1).mean(-1, dtype=np.float64),
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


def head_distances(pattern: np.ndarray, chunk_cells: int = 1 << 22) -> np.ndarray:
    """Mean Jensen–Shannon distance over query rows between every pair of heads.

    Computed in float32, one head against a block of others at a time, so memory stays near
    ``chunk_cells`` floats whatever the head count (never an [h, h, q, k] array).
    Shapes: pattern [h, q, k] -> [h, h] (symmetric, zero diagonal).
    """
    p = np.asarray(pattern, dtype=np.float32)
    h = p.shape[0]
    logp = np.log2(np.clip(p, EPS, None))  # [h, q, k]
    block = max(1, chunk_cells // max(1, p[0].size))
    d = np.zeros((h, h), dtype=np.float64)
    for i in range(h):
        for j0 in range(i + 1, h, block):
            j1 = min(h, j0 + block)
            m = 0.5 * (p[i][None] + p[j0:j1])  # [b, q, k]
            logm = np.log2(np.clip(m, EPS, None))
            kl_i = (p[i][None] * (logp[i][None] - logm)).sum(-1)  # [b, q]
            kl_j = (p[j0:j1] * (logp[j0:j1] - logm)).sum(-1)
            js = np.sqrt(np.clip(0.5 * kl_i + 0.5 * kl_j, 0.0, 1.0)).mean(-1)  # [b]
            d[i, j0:j1] = js
            d[j0:j1, i] = js
    return d


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


def drop_special(
    pattern: np.ndarray, special: np.ndarray, key_special: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Remove special tokens' rows and columns and renormalise each row to sum to 1.

    Rows whose remaining weight is zero stay all-zero. Shapes: pattern [h, n_q, n_k]; special [n_q] bool;
    key_special [n_k] bool (default: special); returns (pattern [h, m_q, m_k], kept rows [m_q], kept
    columns [m_k]).
    """
    keep = np.flatnonzero(~np.asarray(special, dtype=bool))
    keep_k = keep if key_special is None else np.flatnonzero(~np.asarray(key_special, dtype=bool))
    sub = np.asarray(pattern)[:, keep][:, :, keep_k]
    total = sub.sum(-1, keepdims=True)
    out = np.divide(sub, total, out=np.zeros_like(sub), where=total > 0)
    return out.astype(np.asarray(pattern).dtype, copy=False), keep, keep_k


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


def contribution_norms(z: np.ndarray, w_o: np.ndarray) -> np.ndarray:
    """L2 norm of each head's contribution after W^O, ‖z_h · W^O_h‖ per token, one head at a time (never
    the whole [h, n, d_model] array). Shapes: z [h, n, dh], w_o [h, dh, d] -> [h, n]."""
    z, w_o = np.asarray(z, dtype=np.float32), np.asarray(w_o, dtype=np.float32)
    return np.stack([np.linalg.norm(z[i] @ w_o[i], axis=-1) for i in range(z.shape[0])]).astype(np.float64)


def rollout(patterns: np.ndarray) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020) with the residual identity added.

    Per layer: A = mean over heads, Â = 0.5 A + 0.5 I, rows renormalised; rollout_l = Â_l … Â_0.
    Shapes: patterns [n_layers, n_heads, n, n] -> [n_layers, n, n] (row l: rollout up to layer l).
    """
    p = np.asarray(patterns, dtype=np.float64)
    n = p.shape[-1]
    out = np.empty((p.shape[0], n, n))
    acc = np.eye(n)
    for layer in range(p.shape[0]):
        a = 0.5 * p[layer].mean(0) + 0.5 * np.eye(n)
        a = a / a.sum(-1, keepdims=True)
        acc = a @ acc
        out[layer] = acc
    return out


def align_tokens(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Index pairs (i in a, j in b) of the tokens two texts share, in order (difflib matching blocks)."""
    import difflib

    pairs = []
    for block in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks():
        pairs.extend((block.a + k, block.b + k) for k in range(block.size))
    return pairs


def focus_shift(
    pa: np.ndarray, pb: np.ndarray, qa: int, qb: int, pairs: list[tuple[int, int]]
) -> dict[str, np.ndarray]:
    """How a focus token's attention differs between two sentences, per head, on the shared tokens.

    change = total variation distance 0.5 Σ |a - b| over the shared key tokens (0 = same, 1 = disjoint);
    weight on keys only one sentence has counts fully. Shapes: pa [h, na, na], pb [h, nb, nb] -> [h].
    """
    ia = np.asarray([i for i, _ in pairs], dtype=int)
    ib = np.asarray([j for _, j in pairs], dtype=int)
    wa, wb = np.asarray(pa)[:, qa, :], np.asarray(pb)[:, qb, :]  # [h, na], [h, nb]
    shared = np.abs(wa[:, ia] - wb[:, ib]).sum(-1)
    only = (1.0 - wa[:, ia].sum(-1)) + (1.0 - wb[:, ib].sum(-1))  # weight on unshared keys
    return {"change": 0.5 * (shared + np.clip(only, 0.0, None)), "a": wa[:, ia], "b": wb[:, ib]}

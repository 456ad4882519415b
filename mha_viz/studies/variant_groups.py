"""How a layer's K/V heads are grouped and aligned before they are shared (studies/variants.py re-exports all of it):
the group counts that divide the heads, consecutive groups (Ainslie et al.), groups of similar heads (the mean cosine
of their keys and of their values), and each member's orthogonal rotation onto its group's first head (Procrustes;
for rotary keys one 2×2 rotation per frequency pair). Pure tensor maths: no model is run here."""

from __future__ import annotations

import numpy as np
import torch

from mha_viz.trace import MhaVizError

Groups = tuple[tuple[int, ...], ...]  # a partition of one layer's K/V heads


def kv_counts(n_kv_heads: int) -> list[int]:
    """Every group count g that divides the K/V head count, largest (the model itself) first."""
    return [g for g in range(n_kv_heads, 0, -1) if n_kv_heads % g == 0]


def consecutive_groups(n_kv_heads: int, g: int) -> Groups:
    """g groups of consecutive K/V heads (Ainslie et al.)."""
    if g < 1 or n_kv_heads % g:
        raise MhaVizError(f"{g} groups do not divide {n_kv_heads} K/V heads; choose one of {kv_counts(n_kv_heads)}")
    size = n_kv_heads // g
    return tuple(tuple(range(i * size, (i + 1) * size)) for i in range(g))


def similarity(k: torch.Tensor, v: torch.Tensor) -> np.ndarray:
    """The mean of the cosines between heads' flattened keys and between their flattened values.
    Shapes: k, v [n_kv_heads, pos, d_head] -> [n_kv_heads, n_kv_heads]."""

    def cos(t: torch.Tensor) -> torch.Tensor:
        flat = torch.nn.functional.normalize(t.double().flatten(1), dim=1)  # [n_kv, pos * d_head]
        return flat @ flat.T  # [n_kv, n_kv]

    return (0.5 * (cos(k) + cos(v))).numpy()


def aligned_groups(sim: np.ndarray, g: int) -> Groups:
    """g equal-size groups of similar heads: from the most similar remaining pair, a group grows by the remaining
    head most similar to its members on average, until full; then the next group. Shapes: sim [n_kv, n_kv]."""
    n = sim.shape[0]
    size = len(consecutive_groups(n, g)[0])
    left = list(range(n))
    groups = []
    while left:
        if size == 1 or len(left) == size:
            first = [left[0]] if size == 1 else list(left)
        else:
            pairs = [(sim[a, b], -a, -b) for i, a in enumerate(left) for b in left[i + 1 :]]
            _, a, b = max(pairs)
            first = [-a, -b]
        group = first
        while len(group) < size:
            rest = [h for h in left if h not in group]
            group.append(max(rest, key=lambda h: (sim[h, group].mean(), -h)))
        groups.append(tuple(sorted(group)))
        left = [h for h in left if h not in group]
    return tuple(sorted(groups))


def procrustes(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The orthogonal R minimising ‖a R − b‖ (Schönemann 1966: R = U Vᵀ from aᵀb = U S Vᵀ).
    Shapes: a, b [pos, d] -> [d, d]."""
    u, _, vt = torch.linalg.svd(a.double().T @ b.double())
    return (u @ vt).float()


def pair_rotation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The R minimising ‖a R − b‖ among rotations made of one 2×2 rotation per rotary frequency pair (dims i and
    i + d/2), which commute with rotary embeddings. Shapes: a, b [pos, d] (d even) -> [d, d]."""
    d = a.shape[1]
    half = d // 2
    a, b = a.double(), b.double()
    x1, y1, x2, y2 = a[:, :half], a[:, half:], b[:, :half], b[:, half:]  # [pos, d/2] each
    theta = torch.atan2((x1 * y2 - y1 * x2).sum(0), (x1 * x2 + y1 * y2).sum(0))  # [d/2]: angle taking a to b
    c, s = torch.cos(theta), torch.sin(theta)
    r = torch.zeros(d, d, dtype=torch.float64)
    idx = torch.arange(half)
    r[idx, idx], r[idx, idx + half] = c, s  # row vector a: (x, y) R = (x c − y s, x s + y c)
    r[idx + half, idx], r[idx + half, idx + half] = -s, c
    return r.float()


def orthogonal_rotations(
    k: torch.Tensor, v: torch.Tensor, groups: Groups, keys: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each K/V head's (R_K, R_V) onto its group's first head (the first: identity). ``keys``: "plain" (any
    orthogonal R_K), "rotary" (2×2 per frequency pair) or "none" (R_K = I).
    Shapes: k, v [n_kv, pos, dh] -> two [n_kv, dh, dh]."""
    n, _, dh = k.shape
    r_k, r_v = torch.eye(dh).repeat(n, 1, 1), torch.eye(dh).repeat(n, 1, 1)  # [n_kv, dh, dh]
    for g in groups:
        for m in g[1:]:
            r_v[m] = procrustes(v[m], v[g[0]])
            if keys == "plain":
                r_k[m] = procrustes(k[m], k[g[0]])
            elif keys == "rotary":
                r_k[m] = pair_rotation(k[m], k[g[0]])
    return r_k, r_v

"""Differential attention's (DiffLlama) two softmax maps per head pair, their λ-weighted difference, and the pair's
output as W^O reads it, from a trace (its pattern, v and Differential). Pure torch; no model run."""

from __future__ import annotations

import torch

from mha_viz.trace import AttentionTrace, MhaVizError


def pair_of(t: AttentionTrace, i: int) -> tuple[int, int]:
    """Head ``i``'s pair (j, j + h/2): W^O reads A_j − λ · A_{j+h/2} as one differential head."""
    half = t.n_heads // 2
    return i % half, i % half + half


def difference(t: AttentionTrace, j: int) -> torch.Tensor:
    """Pair ``j``'s differential map A_j − λ · A_{j+h/2}. Shapes: [q_pos, k_pos] (rows sum to 1 − λ)."""
    if t.differential is None:
        raise MhaVizError("this layer has no differential attention")
    a, b = pair_of(t, j)
    return t.pattern[a] - t.differential.lam * t.pattern[b]


def pair_outputs(t: AttentionTrace) -> torch.Tensor:
    """Every pair's output as W^O reads it: (1 − λ_init) · RMSNorm(A_j · [V1|V2] − λ · A_{j+h/2} · [V1|V2]), each
    head with its own K/V group. Shapes: returns [h/2, q_pos, 2 · d_head] (pair j is W^O's input columns
    [2·d_head·j, 2·d_head·(j+1)))."""
    d = t.differential
    if d is None:
        raise MhaVizError("this layer has no differential attention")
    g = torch.arange(t.n_heads) // t.group  # [h]: each head's K/V group
    both = torch.cat([t.v, d.v2.to(t.v.dtype)], dim=-1)[g]  # [h, k_pos, 2·d_head]
    out = t.pattern @ both  # [h, q_pos, 2·d_head]
    half = t.n_heads // 2
    diff = out[:half] - d.lam * out[half:]  # [h/2, q_pos, 2·d_head]
    return (1 - d.lam_init) * diff * torch.rsqrt(diff.pow(2).mean(-1, keepdim=True) + d.eps)

"""What-if edits of attention weights: re-split heads and W^O variants.

Every function returns a new AttentionWeights (dataclasses.replace); the input is never mutated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch

from mha_viz.trace import AttentionWeights, MhaVizError

WO_MODES = ("learned", "identity", "random")


def divisors(n: int) -> list[int]:
    """All positive divisors of n, ascending (the valid head counts for width n)."""
    return [d for d in range(1, n + 1) if n % d == 0]


def regroup_heads(weights: AttentionWeights, n_heads: int) -> AttentionWeights:
    """Re-split the same projections into ``n_heads`` heads (a what-if for pretrained weights).

    The concatenated projection [d_model, n_heads * d_head] is unchanged; only the way its
    columns are grouped into heads changes, and W^O's rows are grouped to match. The score
    scale follows the new d_head (1/sqrt(d_head')) unless the layer had a custom scale.
    Shapes: [h, d_model, dh] -> [h', d_model, inner / h'] with inner = h * dh.
    """
    h, d, dh = weights.n_heads, weights.d_model, weights.d_head
    inner = h * dh
    if weights.n_kv_heads != h:
        raise MhaVizError(
            f"this layer shares {weights.n_kv_heads} key/value heads among {h} query heads (grouped-query "
            "attention); re-splitting such a layer into another head count is not supported"
        )
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1 or inner % n_heads:
        width = f"d_model {inner}" if inner == d else f"the attention width {inner}"
        raise MhaVizError(
            f"{width} is not divisible by {n_heads} heads; choose one of {', '.join(map(str, divisors(inner)))}"
        )
    if n_heads == h:
        return weights
    dh2 = inner // n_heads

    def split_in(w: torch.Tensor) -> torch.Tensor:  # [h, d, dh] -> [h', d, dh']
        return w.permute(1, 0, 2).reshape(d, n_heads, dh2).permute(1, 0, 2).contiguous()

    def split_bias(b: torch.Tensor | None) -> torch.Tensor | None:  # [h, dh] -> [h', dh']
        return None if b is None else b.reshape(n_heads, dh2).clone()

    return dataclasses.replace(
        weights,
        W_Q=split_in(weights.W_Q),
        W_K=split_in(weights.W_K),
        W_V=split_in(weights.W_V),
        W_O=weights.W_O.reshape(n_heads, dh2, d).clone(),  # [h', dh', d]
        b_Q=split_bias(weights.b_Q),
        b_K=split_bias(weights.b_K),
        b_V=split_bias(weights.b_V),
    )


def _square_wo(weights: AttentionWeights, matrix: torch.Tensor) -> AttentionWeights:
    """Replace the whole output projection (weight and bias) by a d_model x d_model matrix."""
    h, dh, d = weights.n_heads, weights.d_head, weights.d_model
    return dataclasses.replace(weights, W_O=matrix.reshape(h, dh, d).contiguous(), b_O=None)


def _require_square(weights: AttentionWeights, mode: str) -> None:
    inner = weights.n_heads * weights.d_head
    if inner != weights.d_model:
        raise MhaVizError(f"W^O = {mode} needs n_heads * d_head == d_model, but {inner} != {weights.d_model}")


def wo_identity(weights: AttentionWeights) -> AttentionWeights:
    """W^O = I (and no output bias): the layer's output is the plain concat of the heads."""
    _require_square(weights, "identity")
    eye = torch.eye(weights.d_model, dtype=weights.dtype, device=weights.device)  # [d, d]
    return _square_wo(weights, eye)


def wo_random(weights: AttentionWeights, seed: int = 0) -> AttentionWeights:
    """W^O = a random orthogonal matrix (seeded; no output bias): heads mixed with no learned intent."""
    _require_square(weights, "random")
    gen = torch.Generator().manual_seed(int(seed))
    a = torch.randn(weights.d_model, weights.d_model, generator=gen, dtype=torch.float64)  # [d, d]
    q, r = torch.linalg.qr(a)
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)  # unique, Haar-distributed
    return _square_wo(weights, q.to(device=weights.device, dtype=weights.dtype))


def _check_heads(weights: AttentionWeights, heads: Iterable[int]) -> list[int]:
    chosen = sorted(set(int(i) for i in heads))
    bad = [i for i in chosen if not 0 <= i < weights.n_heads]
    if bad:
        raise MhaVizError(f"head {bad[0]} does not exist; heads are numbered 0 to {weights.n_heads - 1}")
    return chosen


def scale_heads(weights: AttentionWeights, factors: dict[int, float]) -> AttentionWeights:
    """Multiply chosen heads' W^O blocks by a factor each (0 ablates the head)."""
    chosen = _check_heads(weights, factors.keys())
    w_o = weights.W_O.clone()  # [h, dh, d]
    for i in chosen:
        w_o[i] *= float(factors[i])
    return dataclasses.replace(weights, W_O=w_o)


def ablate_heads(weights: AttentionWeights, heads: Iterable[int]) -> AttentionWeights:
    """Zero the W^O blocks of the chosen heads: they contribute nothing to the output."""
    return scale_heads(weights, {i: 0.0 for i in heads})


def apply_wo(weights: AttentionWeights, mode: str, seed: int = 0) -> AttentionWeights:
    """W^O variant by name: "learned" (as given), "identity" or "random"."""
    if mode == "learned":
        return weights
    if mode == "identity":
        return wo_identity(weights)
    if mode == "random":
        return wo_random(weights, seed)
    raise MhaVizError(f"unknown W^O mode {mode!r}; choose one of {', '.join(WO_MODES)}")

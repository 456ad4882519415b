"""What-if edits of attention weights: re-split heads and W^O variants.

Every function returns a new AttentionWeights (dataclasses.replace); the input is never mutated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch

from mha_viz.config import WO_MODES
from mha_viz.trace import AttentionWeights, MhaVizError


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
            f"this layer shares {weights.n_kv_heads} key/value head{'s' if weights.n_kv_heads != 1 else ''} among "
            f"{h} query heads (grouped-query "
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


def _require_square(W_O: torch.Tensor, mode: str) -> None:
    h, dh, d = W_O.shape
    if h * dh != d:
        raise MhaVizError(f"W^O = {mode} needs n_heads * d_head == d_model, but {h * dh} != {d}")


def wo_matrix(W_O: torch.Tensor, mode: str, seed: int = 0) -> torch.Tensor:
    """The W^O of a variant by name, in the layout of ``W_O`` [h, dh, d_model]: "learned" (as given),
    "identity" (the plain concat of the heads) or "random" (a seeded random orthogonal matrix: heads
    mixed with no learned intent). Variants other than "learned" come without an output bias."""
    if mode == "learned":
        return W_O
    if mode not in WO_MODES:
        raise MhaVizError(f"unknown W^O mode {mode!r}; choose one of {', '.join(WO_MODES)}")
    _require_square(W_O, mode)
    h, dh, d = W_O.shape
    if mode == "identity":
        return torch.eye(d, dtype=W_O.dtype, device=W_O.device).reshape(h, dh, d)
    gen = torch.Generator().manual_seed(int(seed))
    a = torch.randn(d, d, generator=gen, dtype=torch.float64)  # [d, d]
    q, r = torch.linalg.qr(a)
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)  # unique, Haar-distributed
    return q.to(device=W_O.device, dtype=W_O.dtype).reshape(h, dh, d).contiguous()


def check_heads(n_heads: int, heads: Iterable[int]) -> list[int]:
    """The chosen head numbers, sorted, or a clear error naming the valid range."""
    chosen = sorted(set(int(i) for i in heads))
    bad = [i for i in chosen if not 0 <= i < n_heads]
    if bad:
        raise MhaVizError(f"head {bad[0]} does not exist; heads are numbered 0 to {n_heads - 1}")
    return chosen


def edit_wo(
    W_O: torch.Tensor,
    b_O: torch.Tensor | None,
    mode: str = "learned",
    seed: int = 0,
    factors: dict[int, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """W^O after the what-ifs: the variant ``mode``, then chosen heads' blocks multiplied by a factor
    each (0 ablates the head). New tensors; the input is never mutated. Shapes: W_O [h, dh, d]; b_O [d]."""
    w_o = wo_matrix(W_O, mode, seed)
    b_o = b_O if mode == "learned" else None
    if factors:
        chosen = check_heads(W_O.shape[0], factors.keys())
        w_o = w_o.clone()
        for i in chosen:
            w_o[i] *= float(factors[i])
    return w_o, b_o


def scale_heads(weights: AttentionWeights, factors: dict[int, float]) -> AttentionWeights:
    """Multiply chosen heads' W^O blocks by a factor each (0 ablates the head)."""
    w_o, _ = edit_wo(weights.W_O, weights.b_O, factors=factors)
    return dataclasses.replace(weights, W_O=w_o)


def ablate_heads(weights: AttentionWeights, heads: Iterable[int]) -> AttentionWeights:
    """Zero the W^O blocks of the chosen heads: they contribute nothing to the output."""
    return scale_heads(weights, {i: 0.0 for i in heads})


def apply_wo(weights: AttentionWeights, mode: str, seed: int = 0) -> AttentionWeights:
    """W^O variant by name: "learned" (as given), "identity" or "random"."""
    w_o, b_o = edit_wo(weights.W_O, weights.b_O, mode, seed)
    return weights if mode == "learned" else dataclasses.replace(weights, W_O=w_o, b_O=b_o)


def wo_identity(weights: AttentionWeights) -> AttentionWeights:
    """W^O = I (and no output bias): the layer's output is the plain concat of the heads."""
    return apply_wo(weights, "identity")


def wo_random(weights: AttentionWeights, seed: int = 0) -> AttentionWeights:
    """W^O = a random orthogonal matrix (seeded; no output bias)."""
    return apply_wo(weights, "random", seed)

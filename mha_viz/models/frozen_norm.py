"""A norm with its scale frozen at the value the model computed for a token is linear (TransformerLens's frozen
LayerNorm scale): LayerNorm maps a part x_c of its input to α·γ ⊙ (x_c − mean(x_c)) and its β becomes a part of its
own; an RMS norm (LLaMA's, Gemma's 1 + w, T5's) maps x_c to α·g ⊙ x_c. The norm's gain g, its bias β and whether it
centres are read by calling the module itself on three probe vectors (never from a table of classes), α per token by
least squares on the model's own input and output, and the result is checked against that output."""

from __future__ import annotations

import torch

from mha_viz.config import MATCH_TOL
from mha_viz.trace import MhaVizError


def close(a: torch.Tensor, b: torch.Tensor, tol: float = MATCH_TOL) -> bool:
    """Every row of ``a`` within ``tol`` of ``b``'s row, relative to the row's length. Shapes: [..., D] both."""
    if a.shape != b.shape:
        return False
    gap = (a - b).norm(dim=-1)
    return bool((gap <= tol * b.norm(dim=-1).clamp_min(1e-6)).all())


def _call(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:  # x [m, D] float64 -> [m, D] float64
    p = next(iter(norm.parameters()), None)
    like = p if p is not None else torch.zeros(())
    with torch.no_grad():
        y = norm(x[None].to(device=like.device, dtype=like.dtype if like.is_floating_point() else torch.float32))
    return y[0].detach().to(device="cpu", dtype=torch.float64)


def probe(norm: torch.nn.Module, d: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(gain [d] up to one factor, bias β [d], centres) of ``norm`` over vectors of length ``d``."""
    if d < 2:
        raise MhaVizError("a norm over fewer than two numbers cannot be linearised")
    e1 = torch.tensor([(-1.0) ** i for i in range(d)], dtype=torch.float64)  # mean 0 for even d
    e2 = e1.roll(1)
    if d % 2:  # odd d: zero mean by leaving one entry out, a different one in each probe
        e1[-1], e2[0] = 0.0, 0.0
    ys = _call(norm, torch.stack([torch.zeros(d, dtype=torch.float64), e1, e2, torch.ones(d, dtype=torch.float64)]))
    beta = ys[0]
    gain = torch.where(e1 != 0, (ys[1] - beta) * e1, (ys[2] - beta) * e2)  # [d]
    centres = bool((ys[3] - beta).norm() <= MATCH_TOL * max(float(gain.norm()), 1e-12))  # a constant maps to β
    return gain, beta, centres


def freeze(
    norm: torch.nn.Module, x: torch.Tensor, y: torch.Tensor | None, parts: torch.Tensor, where: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``parts`` (which sum to the norm's input ``x``) through ``norm`` with its scale frozen per token: (the parts
    after it, the norm's bias β as a part of its own, or None when it has none). ``y`` is the model's output (None:
    computed by calling the norm on ``x``). Raises MhaVizError when the norm is not of this linear-once-frozen kind.
    Shapes: x, y [..., D]; parts [n, ..., D]; returns [n, ..., D] and [..., D] (float64)."""
    x, parts = x.double(), parts.double()
    d = x.shape[-1]
    if y is None:
        y = _call(norm, x.reshape(-1, d)).reshape(x.shape)
    y = y.double()
    gain, beta, centres = probe(norm, d)
    xc = x - x.mean(-1, keepdim=True) if centres else x
    g = gain * xc  # [..., D]
    alpha = ((y - beta) * g).sum(-1, keepdim=True) / (g * g).sum(-1, keepdim=True).clamp_min(1e-300)  # [..., 1]
    if not close(alpha * g + beta, y):
        raise MhaVizError(
            f"the norm {where} is not a LayerNorm or RMS norm with one scale per token, so its input does not split "
            "into parts exactly; this architecture is not supported by the score split"
        )
    pc = parts - parts.mean(-1, keepdim=True) if centres else parts
    out = alpha * gain * pc  # [n, ..., D]
    has_bias = bool(beta.abs().max() > 0)
    return out, (beta.expand_as(y).clone() if has_bias else None)

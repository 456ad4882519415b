"""Differential attention (DiffLlama, https://arxiv.org/abs/2410.05258) as the model computes it.

The model calls transformers' attention twice per layer with the same q and k (capture.py records the second call's
values as Call.v2, in the same layer) and combines head pairs with a learned λ before a norm; this reads λ from the
module's own parameters exactly as its forward computes it.
"""

from __future__ import annotations

import torch

from mha_viz.models.call import Call
from mha_viz.trace import Differential

_PARAMS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


def differential_of(module: torch.nn.Module, call: Call) -> Differential | None:
    """The differential part of a recorded call of ``module`` (its attention module), or None where the call had no
    second value call or the module has no λ."""
    if call.v2 is None or not all(isinstance(getattr(module, n, None), torch.Tensor) for n in _PARAMS):
        return None
    q1, k1, q2, k2 = (getattr(module, n).detach().float().cpu() for n in _PARAMS)  # [d_head] each
    lam_init = float(getattr(module, "lambda_init", 0.0))
    lam = torch.exp((q1 * k1).sum()) - torch.exp((q2 * k2).sum()) + lam_init  # as the model's forward, in float32
    eps = getattr(getattr(module, "groupnorm", None), "eps", None)
    return Differential(
        lam=float(lam),
        lam_init=lam_init,
        eps=float(eps) if eps is not None else float(torch.finfo(torch.float32).eps),
        v2=call.v2[0].clone(),  # [kv, k_pos, d_head]
    )

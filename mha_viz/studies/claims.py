"""The two claims of the source articles, computed live on one traced layer (float64, no Streamlit):

loop_vs_batched(trace, weights, x) -> Equivalence     a Python loop over heads == one big matrix
identity_equivalence(weights, x, ...) -> Equivalence  h = 1 with W^O = I == plain self-attention
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha_viz.studies.sweeps import single_head_identity
from mha_viz.trace import AttentionTrace, AttentionWeights, MhaVizError


@dataclass(frozen=True)
class Equivalence:
    """Two computations that should agree. Shapes: left, right [rows, cols] float64."""

    left_name: str
    right_name: str
    left: np.ndarray
    right: np.ndarray
    note: str

    @property
    def diff(self) -> np.ndarray:
        return np.abs(self.left - self.right)

    @property
    def max_diff(self) -> float:
        return float(self.diff.max()) if self.diff.size else 0.0


def _masked_softmax(s: torch.Tensor, allowed: torch.Tensor, sink: torch.Tensor | None = None) -> torch.Tensor:
    """Row-wise softmax with masked cells at −∞; all-masked rows even over every key (eager); a learned sink logit
    per head (gpt-oss) counted in the denominator when given. Shapes: s, allowed [.., n, nk]; sink [] or [h] (one
    per leading row)."""
    s = s.masked_fill(~allowed, float("-inf"))
    if sink is not None:
        column = sink.to(s).reshape(*sink.shape, *([1] * (s.dim() - sink.dim()))).expand(*s.shape[:-1], 1)
        return torch.softmax(torch.cat([s, column], dim=-1), dim=-1)[..., :-1]
    return torch.softmax(s, dim=-1).nan_to_num(1.0 / s.shape[-1])


def _score_extras(s: torch.Tensor, trace: AttentionTrace, head: int | None) -> torch.Tensor:
    """Soft-cap and position bias, as the model applies them after scaling."""
    if trace.softcap is not None:
        s = torch.tanh(s / trace.softcap) * trace.softcap
    if trace.bias is not None:
        b = trace.bias.to(torch.float64)  # [h | 1, n, nk]
        s = s + (b if head is None else b[min(head, b.shape[0] - 1)])
    return s


def loop_vs_batched(trace: AttentionTrace, weights: AttentionWeights | None, x: torch.Tensor | None) -> Equivalence:
    """A Python loop over heads against the one-big-matrix form, both in float64, on this layer as traced
    (its scale, mask, W^O and b_O). With ``weights`` (plain layers) both start from X: the loop uses each
    head's own d_model × d_k matrices; the big form one d_model × h·d_k projection reshaped into heads.
    Without, both start from the recorded q, k, v. Shapes: x [n, d_model]; returns outputs [n, d_model]."""
    if trace.routing is not None:
        raise MhaVizError("this layer's W^O is chosen per token (a mixture of attention heads): no one big W^O")
    f64 = torch.float64
    allowed = torch.isfinite(trace.scores)  # [h, n, nk]: the mask as the layer used it
    h, n, dk = trace.q.shape
    dv = trace.v.shape[-1]  # the value head size (latent attention: ≠ dk)
    w_o = trace.W_O.to(f64)  # [h, dv, d]
    b_o = None if trace.b_O is None else trace.b_O.to(f64)
    group = trace.group
    with torch.no_grad():
        if weights is not None and x is not None:
            w = weights.to("cpu", f64)
            xd = x.to(f64)  # [n, d]

            def head_proj(wm: torch.Tensor, b: torch.Tensor | None, j: int) -> torch.Tensor:
                return xd @ wm[j] + (0 if b is None else b[j])  # [n, dk]

            def big_proj(wm: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
                c = wm.shape[0]
                full = wm.permute(1, 0, 2).reshape(wm.shape[1], c * dk)  # [d, c*dk]: one big matrix
                y = xd @ full + (0 if b is None else b.reshape(-1))  # [n, c*dk]
                return y.view(n, c, dk).transpose(0, 1)  # [c, n, dk]

            loop_q = [head_proj(w.W_Q, w.b_Q, j) for j in range(h)]
            loop_k = [head_proj(w.W_K, w.b_K, j // group) for j in range(h)]
            loop_v = [head_proj(w.W_V, w.b_V, j // group) for j in range(h)]
            big_q, big_k, big_v = big_proj(w.W_Q, w.b_Q), big_proj(w.W_K, w.b_K), big_proj(w.W_V, w.b_V)
            biased = " (with their biases)" if weights.b_Q is not None or weights.b_K is not None else ""
            note = f"Both start from X and this layer's W_Q, W_K, W_V{biased}."
        else:
            q, k, v = trace.q.to(f64), trace.k.to(f64), trace.v.to(f64)
            loop_q = [q[j] for j in range(h)]
            loop_k = [k[j // group] for j in range(h)]
            loop_v = [v[j // group] for j in range(h)]
            big_q, big_k, big_v = q, k, v
            note = (
                "This layer's Q and K are not plain linear maps of X (or X was not recorded), so both start from the "
                "q, k, v the model recorded: a Python loop over heads against one batched einsum."
            )
        heads = []
        for j in range(h):  # the small-matrices form
            s = _score_extras((loop_q[j] @ loop_k[j].T) * trace.scale, trace, j)  # [n, nk]
            sink = None if trace.sink is None else trace.sink[j]
            heads.append(_masked_softmax(s, allowed[j], sink) @ loop_v[j])  # [n, dv]
        loop_out = torch.cat(heads, dim=1) @ w_o.reshape(h * dv, -1)  # [n, d]
        # the one-big-matrix form: all heads in one batched product
        k_all = big_k.repeat_interleave(group, dim=0)  # [h, nk, dk]
        v_all = big_v.repeat_interleave(group, dim=0)
        s_all = _score_extras(torch.einsum("hqd,hkd->hqk", big_q, k_all) * trace.scale, trace, None)  # [h, n, nk]
        z_all = torch.einsum("hqk,hkd->hqd", _masked_softmax(s_all, allowed, trace.sink), v_all)  # [h, n, dv]
        big_out = z_all.transpose(0, 1).reshape(n, h * dv) @ w_o.reshape(h * dv, -1)  # [n, d]
        if b_o is not None:
            loop_out, big_out = loop_out + b_o, big_out + b_o
    return Equivalence(
        "loop over heads, concat, · W^O", "one big matrix, batched", loop_out.numpy(), big_out.numpy(), note
    )


def identity_blocker(plain: bool, n_heads: int, n_kv_heads: int, d_head: int, d_model: int) -> str | None:
    """Why claim (b) cannot be shown on this layer, or None when it can."""
    if not plain:
        return (
            "this layer's Q and K are not plain linear maps of X (rotary embeddings, QK-norm or cross-attention), "
            "so its heads cannot be re-split into one head of width d_model"
        )
    if n_kv_heads != n_heads:
        return f"{n_heads} query heads share {n_kv_heads} key/value heads (grouped-query attention): no single head"
    if n_heads * d_head != d_model:
        return f"the heads' width {n_heads} × {d_head} is not d_model = {d_model}, so W^O = I does not fit"
    return None


def identity_equivalence(
    weights: AttentionWeights, x: torch.Tensor, scaled: bool = True, allowed: torch.Tensor | None = None
) -> Equivalence:
    """Claim (b): MultiHead with h = 1 and W^O = I against softmax(X W_Q (X W_K)ᵀ / √d) X W_V (float64).
    Shapes: x [n, d_model]; allowed [n, n] bool (the layer's mask) or None; returns [n, d_model] each."""
    mha, plain = single_head_identity(weights, x, scaled=scaled, allowed=allowed)
    return Equivalence(
        "MultiHead, h = 1, W^O = I",
        "softmax(X W_Q (X W_K)ᵀ / √d) X W_V",
        mha.numpy(),
        plain.numpy(),
        "Both use this layer's own projections, re-split into one head of width d_model.",
    )

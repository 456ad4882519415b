"""A head's score s_ij split exactly into query-source × key-source terms (issue 37 §1).

q_i = Σ_c q_i^c + (query bias), k_j = Σ_c' k_j^c' + (key bias): each residual source (score_sources.py) through the
layer's pre-norm (frozen), W_Q or W_K, QK-norm (frozen) and the rotary rotation of its token (linear), so
s_ij = scale · Σ_{c,c'} q_i^c · k_j^c' + the position bias. Soft-capped models (Gemma 2) are split before the cap.
Every split is checked against the model's own q_i, k_j and score (the ones the capture records) within MATCH_TOL.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from mha_viz.attention import attention_pattern
from mha_viz.config import MATCH_TOL
from mha_viz.models.call import Call
from mha_viz.models.frozen_norm import close, freeze
from mha_viz.models.load import LoadedModel
from mha_viz.models.offload import linear_in_out
from mha_viz.models.score_record import SourceRecord
from mha_viz.models.score_sources import Source, attention_input, residual_sources
from mha_viz.trace import MhaVizError


@dataclass(frozen=True, eq=False)
class Sides:
    """One head's query and key parts at the recorded tokens. Shapes: q [n_q, t, dh], k [n_k, t, dh] (float64)."""

    q: torch.Tensor
    k: torch.Tensor
    q_sources: tuple[Source, ...]
    k_sources: tuple[Source, ...]


def _projections(lm: LoadedModel, part: str, layer: int) -> tuple[tuple, tuple, tuple]:
    """((W_Q [d, h*dh], b_Q), (W_K [d, kv*dh], b_K), (q-norm, k-norm) modules or None)."""
    site, model = lm.site(part, layer), lm.model
    attn = model.get_submodule(site.name)
    if len(site.qkv) == 1:  # one fused Q|K|V (GPT-2)
        w, b = linear_in_out(model.get_submodule(site.qkv[0]))
        h, kv = lm.n_heads, lm.n_kv_heads
        dh = w.shape[1] // (h + 2 * kv)
        sizes = [h * dh, kv * dh, kv * dh]
        (wq, wk, _), bs = w.split(sizes, dim=1), (None,) * 3 if b is None else b.split(sizes)
        return (wq, bs[0]), (wk, bs[1]), (None, None)
    names = site.qkv[:2] or site.pre_rotary
    if not names:  # QK-norm (Qwen 3, OLMo 2, Gemma 3): the projections by name, the model's output checks them
        names = next(((f"{site.name}.{q}", f"{site.name}.{k}") for q, k in (("q_proj", "k_proj"), ("query", "key"))
                      if hasattr(attn, q) and hasattr(attn, k)), ())  # fmt: skip
    if not names:
        raise MhaVizError(f"no plain query and key projections in {site.name} (fused per head?): not supported")
    pairs = (("q_norm", "k_norm"), ("q_layernorm", "k_layernorm"))
    norms = next(((getattr(attn, q), getattr(attn, k)) for q, k in pairs if hasattr(attn, q) and hasattr(attn, k)),
                 (None, None))  # fmt: skip
    return linear_in_out(model.get_submodule(names[0])), linear_in_out(model.get_submodule(names[1])), norms


def _side(
    x: torch.Tensor, proj: tuple, norm: torch.nn.Module | None, heads: int, srcs: list, name: str
) -> torch.Tensor:
    """Sources [n, t, d] -> [n(+1), t, heads, dh]: through W (bias a part of its own) and a frozen QK-norm."""
    w, b = proj
    y = torch.einsum("ntd,de->nte", x, w.double())  # [n, t, heads*dh]
    if b is not None and bool(b.abs().max() > 0):
        y = torch.cat([y, b.double().expand(1, *y.shape[1:])])
        srcs.append(Source(f"{name} bias", "proj_bias"))
    n, t, _ = y.shape
    if norm is None:
        return y.view(n, t, heads, -1)
    weight = getattr(norm, "weight", None)
    whole = isinstance(weight, torch.Tensor) and weight.shape[-1] == y.shape[-1]  # OLMo 2: over every head at once
    y = y if whole else y.view(n, t, heads, -1)
    y, beta = freeze(norm, y.sum(0), None, y, f"{name}-norm")
    if beta is not None:
        y = torch.cat([y, beta[None]])
        srcs.append(Source(f"{name}-norm β", "norm_bias"))
    return y.view(y.shape[0], t, heads, -1)


def _rotate(lm: LoadedModel, part: str, layer: int, rope: tuple | None, q: torch.Tensor, k: torch.Tensor) -> tuple:
    """Each part rotated by its token's angles with the model's own apply_rotary_pos_emb (linear). [n, t, dh] each."""
    if rope is None:
        return q, k
    attn = lm.model.get_submodule(lm.site(part, layer).name)
    fn = getattr(sys.modules.get(type(attn).__module__), "apply_rotary_pos_emb", None)
    if fn is None:
        raise MhaVizError(f"{type(attn).__name__} rotates q and k without apply_rotary_pos_emb; not supported")
    cos, sin = rope
    try:
        qr, kr = fn(q[None], k[None], cos, sin)  # parts in the heads' place: [1, n, t, dh], angles [1, t, rot]
    except RuntimeError:  # Phi: the model rotates part of each head outside apply_rotary_pos_emb
        raise MhaVizError(f"{type(attn).__name__} rotates only part of q and k itself; not supported yet") from None
    return qr[0], kr[0]


def _ungated(proj: tuple, heads: int, dh: int) -> tuple:
    """W_Q that also writes a gate (Qwen3-Next: [query | gate] per head, 2·dh columns each) -> the query columns.
    Shapes: W [d, heads*2*dh] -> [d, heads*dh], b likewise; other projections unchanged."""
    w, b = proj
    if w.shape[1] != 2 * heads * dh:
        return proj
    w = w.reshape(w.shape[0], heads, 2, dh)[:, :, 0].reshape(w.shape[0], heads * dh)
    return w, None if b is None else b.reshape(heads, 2, dh)[:, 0].reshape(heads * dh)


def sides(lm: LoadedModel, part: str, layer: int, head: int, rec: SourceRecord, call: Call) -> Sides:
    """Head ``head``'s q and k at the recorded tokens split by source, checked against the model's own q and k.
    Any other failure inside the split (a layout it does not follow) becomes a MhaVizError naming what failed."""
    try:
        return _sides(lm, part, layer, head, rec, call)
    except (RuntimeError, ValueError, IndexError, KeyError, TypeError) as e:
        what = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise MhaVizError(
            f"the score split cannot follow layer {layer}'s query/key path in {lm.name} ({what}); this "
            "architecture is not supported by the score split"
        ) from None


def _sides(lm: LoadedModel, part: str, layer: int, head: int, rec: SourceRecord, call: Call) -> Sides:
    parts, srcs = residual_sources(lm, part, layer, rec)
    x, srcs = attention_input(lm, layer, rec, parts, srcs)
    pq, pk, (nq, nk) = _projections(lm, part, layer)
    h, kv = call.q.shape[1], call.k.shape[1]
    pq = _ungated(pq, h, call.q.shape[-1])
    q_srcs, k_srcs = list(srcs), list(srcs)
    q = _side(x, pq, nq, h, q_srcs, "query")[:, :, head]  # [n_q, t, dh]
    k = _side(x, pk, nk, kv, k_srcs, "key")[:, :, head // max(1, h // kv)]  # [n_k, t, dh]
    q, k = _rotate(lm, part, layer, rec.rope, q, k)
    pos = torch.tensor(rec.positions)
    if not close(q.sum(0), call.q[0, head, pos].double()) or not close(
        k.sum(0), call.k[0, head // (h // kv), pos].double()
    ):
        raise MhaVizError(
            f"the sources of layer {layer}'s queries or keys do not add up to the model's own (its position "
            "embedding or query/key path is not one this split follows); the score split refuses to show it"
        )
    return Sides(q, k, tuple(q_srcs), tuple(k_srcs))


def model_score(call: Call, head: int, i: int, j: int) -> tuple[float, float, float]:
    """(the model's pre-softmax score before any soft-cap: scale · q_i·k_j, the position bias it adds, the weight
    the model gives key j from query i), from what the capture recorded."""
    h, kv = call.q.shape[1], call.k.shape[1]
    q, k = call.q[0, head, i].double(), call.k[0, head // (h // kv), j].double()
    bias = 0.0 if call.bias is None else float(call.bias[0, head if call.bias.shape[1] > 1 else 0, i, j])
    _, pattern, _ = attention_pattern(
        call.q[:1, :, i : i + 1], call.k[:1], scale=call.scaling, softcap=call.softcap,
        bias=None if call.bias is None else call.bias[:1, :, i : i + 1], sink=call.sink,
        allowed=None if call.allowed is None else call.allowed[:1, :, i : i + 1],
    )  # fmt: skip
    return call.scaling * float(q @ k), bias, float(pattern[0, head, 0, j])


def check_sum(total: float, score: float, what: str) -> None:
    """Refuse a split that does not add up to the model's own score within MATCH_TOL (relative, floor 1)."""
    if abs(total - score) > MATCH_TOL * max(1.0, abs(score)):
        raise MhaVizError(f"the split of {what} adds up to {total:.6g}, not the model's {score:.6g}; not shown")

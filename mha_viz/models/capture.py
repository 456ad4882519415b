"""The attention implementation mha-viz registers with transformers: the model does the math, we record it.

Every model is loaded with ``attn_implementation=NAME``. The registered function calls the model's own
eager attention (``eager_attention_forward`` of its modeling module), so the model computes exactly what
it computes with "eager". Only while a Recorder is active *in the calling context* (a ContextVar: each
thread, so each app session, has its own) does it record what the model used — q, k, v after rotary
embeddings and QK-norm, the mask as applied, the scaling, soft-cap and position bias — check our own
recomputation against the model's weights, and optionally zero heads on their way into W^O or replace
values the model computed (a head's q, k, v or output: activation patching) by given ones.
Two requests tracing through the same shared model at once never see each other's tensors, and no lock
is needed: nothing per-request is stored on the model.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from mha_viz.models.call import Call
from mha_viz.models.self_check import self_check
from mha_viz.trace import MhaVizError

NAME = "mha_viz"
_ACTIVE: ContextVar[Recorder | None] = ContextVar("mha_viz_recorder", default=None)
_SIGNATURES: dict[Callable, inspect.Signature] = {}
# (where, values): torch.where(where, values, computed), both broadcast to the tensor replaced (run.run_model);
# (None, values): computed + values (a zero tensor that requires grad: the gradient at that activation)
Replacement = tuple[torch.Tensor | None, torch.Tensor]


@dataclass(eq=False)
class Recorder:
    """What one request records. ``parts`` maps id(attention module) to its part ("encoder", "decoder",
    "cross"); ``ablate`` maps (part, layer) to heads zeroed on their way into W^O for this pass only."""

    parts: Mapping[int, str] = field(default_factory=dict)
    ablate: Mapping[tuple[str, int], Sequence[int]] = field(default_factory=dict)
    # (part, layer, "q" | "k" | "v" | "out") -> values put in place of the model's, for this pass only
    replace: Mapping[tuple[str, int, str], Replacement] = field(default_factory=dict)
    # (part, layer) -> groups of K/V heads whose keys and values are replaced by the group's mean (GQA conversion)
    share: Mapping[tuple[str, int], Sequence[Sequence[int]]] = field(default_factory=dict)
    # (part, layer) -> (R_K, R_V) [n_kv_heads, d_head, d_head] orthogonal: each K/V head's keys and values rotated
    # (its query heads' queries by R_K, their outputs back by R_V^T) before ``share`` pools them (2412.20677)
    rotate: Mapping[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    # (part, layer) -> per-token head mask [q_pos, n_heads] (1 keep, 0 zero) applied on the way into W^O
    head_mask: Mapping[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    # route(part, layer, attn_output [b, q_pos, n_heads, d_head]) -> mask [b, q_pos, n_heads] or None (no change)
    route: Callable[[str, int, torch.Tensor], torch.Tensor | None] | None = None
    keep: bool = True  # False: only ablate, record nothing (whole-model runs)
    only: tuple[str, int] | None = None  # record only this (part, layer); None: every call
    stop: bool = False  # with ``only``: end the pass (StopForward) once that layer's W^O output is filed
    extras: bool = True  # False: only what the pattern needs (q, k, v, bias, mask); no X, W^O in/out, pre-rotary
    tile_cells: int = 0  # > 0: each call also keeps its checked pattern's block means, at most this many per side
    progress: Callable[[int], None] | None = None  # told the number of attention calls made so far, after each one
    made: int = 0  # attention calls made in this pass (recorded or not)
    calls: list[Call] = field(default_factory=list)
    pending: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = field(default_factory=dict)
    pending_pre: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)
    last: dict[int, Call] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    # (id(module), layer, query, key) of the last call: the same module calling again with the same q and k (a
    # differential model's second value call) is the same layer, not the next one
    prev: tuple[int, int, torch.Tensor, torch.Tensor] | None = None

    def wants(self, part: str, layer: int) -> bool:
        """Whether the call (part, layer) is recorded."""
        return self.keep and (self.only is None or self.only == (part, layer))

    def upcoming(self, module: torch.nn.Module) -> tuple[str, int]:
        """(part, layer) of ``module``'s next attention call (each module is called once per pass)."""
        part = self.parts.get(id(module), "?")
        return part, self.counts.get(part, 0)

    def next_layer(self, part: str) -> int:
        layer = self.counts.get(part, 0)
        self.counts[part] = layer + 1
        return layer


class StopForward(Exception):
    """Raised by the W^O hook to end a pass after the one recorded layer (Recorder.stop)."""


def active() -> Recorder | None:
    """The Recorder active in this context (thread), or None."""
    return _ACTIVE.get()


@contextmanager
def recording(recorder: Recorder) -> Iterator[Recorder]:
    """Make ``recorder`` the active one in this context (thread) for the length of the block."""
    token = _ACTIVE.set(recorder)
    try:
        yield recorder
    finally:
        _ACTIVE.reset(token)


def cpu32(t: torch.Tensor) -> torch.Tensor:
    """Detached, float32, on the CPU: how every recorded tensor is kept."""
    return t.detach().to(device="cpu", dtype=torch.float32)


def eager_of(module: torch.nn.Module) -> Callable:
    """The model's own eager attention function (from the module's modeling file)."""
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise MhaVizError(
            f"{type(module).__name__} has no eager attention function that mha-viz can record; "
            "this architecture is not supported"
        )
    return fn


def _split_mask(mask: torch.Tensor | None, k_len: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """An additive float mask -> (allowed bool, the finite additive part). Shapes: [b, 1|h, q, k]."""
    if mask is None:
        return None, None
    mask = mask[..., :k_len]
    if mask.dtype == torch.bool:
        return mask, None
    allowed = mask > torch.finfo(mask.dtype).min / 2  # masked entries are the dtype's minimum (or -inf)
    extra = torch.where(allowed, mask, torch.zeros((), dtype=mask.dtype, device=mask.device))
    return allowed, (extra if bool(extra.any()) else None)


def mha_viz_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *args: object,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The registered implementation: the model's eager attention, recorded when a Recorder is active.

    Shapes (transformers' convention): query [b, n_heads, q_pos, d_head]; key, value [b, n_kv_heads,
    k_pos, d_head]; returns attn_output [b, q_pos, n_heads, d_head] and weights [b, n_heads, q_pos, k_pos].
    """
    eager = eager_of(module)
    rec = _ACTIVE.get()
    if rec is None:
        return eager(module, query, key, value, attention_mask, *args, **kwargs)
    part = rec.parts.get(id(module), "?")
    again = rec.prev is not None and rec.prev[0] == id(module) and rec.prev[2] is query and rec.prev[3] is key
    layer = rec.prev[1] if again else rec.next_layer(part)
    rec.prev = (id(module), layer, query, key)
    rot = rec.rotate.get((part, layer))
    if rot is not None:
        query, key, value = rotated(query, key, value, *rot)
    groups = rec.share.get((part, layer))
    if groups:
        key, value = shared(key, groups), shared(value, groups)
    if rec.replace:
        query, key, value = (_replaced(rec, (part, layer, n), t) for n, t in (("q", query), ("k", key), ("v", value)))
    out, weights = eager(module, query, key, value, attention_mask, *args, **kwargs)
    if rot is not None:
        rv = rot[1].to(out.device, out.dtype).repeat_interleave(out.shape[2] // rot[1].shape[0], 0)  # [h, dh, dh]
        out = torch.einsum("bqhe,hde->bqhd", out, rv)  # z_h R_V^T: back to the head's own value basis
    heads = rec.ablate.get((part, layer))
    if heads:
        out = out.clone()
        out[:, :, list(heads), :] = 0  # zeroed on the way into W^O
    mask = rec.head_mask.get((part, layer))
    if mask is not None:
        out = out * mask.to(out.device, out.dtype)[None, :, :, None]  # [b, q_pos, n_heads, d_head]
    routed = rec.route(part, layer, out) if rec.route is not None else None
    if routed is not None:
        out = out * routed.to(out.device, out.dtype)[..., None]  # [b, q_pos, n_heads, d_head]
    if rec.replace:
        out = _replaced(rec, (part, layer, "out"), out)  # [b, q_pos, n_heads, d_head]
    if again and rec.wants(part, layer) and id(module) in rec.last:
        if rec.extras:  # DiffLlama: the same weights over the second half of V (models/differential.py)
            rec.last[id(module)].v2 = cpu32(value)
    elif rec.wants(part, layer):
        rec.calls.append(_record(rec, module, eager, (query, key, value, attention_mask, *args), kwargs, out, weights))
        rec.calls[-1].part, rec.calls[-1].layer = part, layer
        rec.last[id(module)] = rec.calls[-1]
    if not again:
        rec.made += 1
        if rec.progress is not None:
            rec.progress(rec.made)
    return out, weights


def rotated(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, r_k: torch.Tensor, r_v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each K/V head's keys and values times its orthogonal R_K, R_V, and each query head's queries times its K/V
    head's R_K: the scores (Q R)(K R)ᵀ = Q Kᵀ are unchanged. Shapes: query [b, h, q, dh]; key, value
    [b, kv, k, dh]; r_k, r_v [kv, dh, dh]."""
    r_k, r_v = r_k.to(key.device, key.dtype), r_v.to(key.device, key.dtype)
    rq = r_k.repeat_interleave(query.shape[1] // r_k.shape[0], 0)  # [h, dh, dh]
    return (torch.einsum("bhqd,hde->bhqe", query, rq), torch.einsum("bkpd,kde->bkpe", key, r_k),
            torch.einsum("bkpd,kde->bkpe", value, r_v))  # fmt: skip


def shared(t: torch.Tensor, groups: Sequence[Sequence[int]]) -> torch.Tensor:
    """``t`` with each group's K/V heads replaced by their mean (a new tensor): the pooled head every member's
    query heads read. Exact for a linear projection (and after rotary embeddings, the same rotation for every head).
    Shapes: t [b, n_kv_heads, pos, d_head] -> the same."""
    out = t.clone()
    for g in groups:
        out[:, list(g)] = t[:, list(g)].mean(1, keepdim=True)  # [b, |g|, pos, d_head]
    return out


def _replaced(rec: Recorder, key: tuple[str, int, str], t: torch.Tensor) -> torch.Tensor:
    """``t`` with the replacement planned for ``key`` put in (a new tensor), or ``t`` itself."""
    found = rec.replace.get(key)
    if found is None:
        return t
    where, values = found
    values = values.to(device=t.device, dtype=t.dtype)
    return t + values if where is None else torch.where(where.to(t.device), values, t)


def _record(
    rec: Recorder, module: torch.nn.Module, eager: Callable, args: tuple, kwargs: dict, out: torch.Tensor, weights
) -> Call:
    sig = _SIGNATURES.get(eager) or _SIGNATURES.setdefault(eager, inspect.signature(eager))
    bound = sig.bind(module, *args, **kwargs)
    named = dict(bound.arguments)
    named.update(named.pop("kwargs", {}) or {})
    query, key, value, mask = args[:4]
    scaling = named.get("scaling")
    scaling = float(query.shape[-1] ** -0.5 if scaling is None else scaling)
    softcap = named.get("softcap")
    sink = named.get("s_aux")  # gpt-oss: one learned sink logit per head
    bias = named.get("position_bias")
    if isinstance(bias, torch.Tensor) and not bool(bias.any()):
        bias = None  # T5 passes zeros where a layer has no relative position bias (cross-attention)
    allowed, extra = _split_mask(mask, int(key.shape[-2]))
    bias = extra if bias is None else (bias if extra is None else bias + extra)
    call = Call(
        module_id=id(module),
        q=cpu32(query),
        k=cpu32(key),
        v=cpu32(value),
        scaling=scaling,
        softcap=None if softcap is None else float(softcap),
        bias=None if bias is None else cpu32(bias),
        allowed=None if allowed is None else allowed.detach().cpu(),
        delta=0.0,
        wo_in=cpu32(out.reshape(*out.shape[:2], -1)) if rec.extras else None,  # [b, q_pos, h*dh]
        sink=cpu32(sink) if isinstance(sink, torch.Tensor) else None,
    )
    if isinstance(weights, torch.Tensor):  # the self-check: our recomputation against the model's own weights
        call.delta = self_check(call, weights, rec.tile_cells)
    x, x_kv = rec.pending.pop(id(module), (None, None))
    call.x, call.x_kv = x, x_kv
    call.q_pre = rec.pending_pre.pop((id(module), "q"), None)
    call.k_pre = rec.pending_pre.pop((id(module), "k"), None)
    call.c_kv = rec.pending_pre.pop((id(module), "c_kv"), None)
    call.k_rope_pre = rec.pending_pre.pop((id(module), "k_rope"), None)
    call.experts = rec.pending_pre.pop((id(module), "experts"), None)
    call.gates = rec.pending_pre.pop((id(module), "gates"), None)
    return call


def register() -> None:
    """Register NAME with transformers' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(NAME, mha_viz_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, eager_mask)

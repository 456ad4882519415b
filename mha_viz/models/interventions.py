"""What is done to a model run at its attention calls: one small frozen class per experiment (issue 36 §1).

Each intervention is keyed by (part, layer) and changes that call only, for one pass: ``pre(q, k, v)`` before
the model's own eager attention, ``mask(attention_mask, q, k)`` on the mask it gets, ``post(out)`` after it
(capture.mha_viz_attention applies them and records). ``stage`` fixes the order, whatever order they are given
in: rotate → share K/V → (key mask) → replace q/k/v → the model's attention → rotate back → ablate → head mask
→ route → replace out. A new experiment is one class here and one test.

A Record reads instead of changing: what passes through the model's modules beyond its attention calls (a layer's
input, its norms and MLP, W^O's input and output: the residual stream per component, score_record.RecordSources; the
final norm's input, unembed.FinalResidual). Its hooks live for its pass only (watch.py); the pass's ModelRun.records
holds what it recorded.

Shapes (transformers' layout): query [b, h, q, dh]; key, value [b, kv, k, dh]; attention_mask [b, 1|h, q, k]
(additive: 0 kept, the dtype's minimum masked); out [b, q, h, dh] (the heads on their way into W^O).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import torch

from mha_viz.trace import MhaVizError


class LoadedModel(Protocol):
    """What check() reads of a loaded model (models.load.LoadedModel; a protocol, so this module imports nothing
    of load.py, which imports capture.py, which imports this)."""

    n_heads: int
    n_kv_heads: int

    def site(self, part: str | None, layer: int) -> Any: ...


Tensor = torch.Tensor
QKV = tuple[Tensor, Tensor, Tensor]
WHATS = ("q", "k", "v", "out")


@dataclass(frozen=True, eq=False)
class Intervention:
    """The base: keyed by (part, layer); every step leaves its tensor as it is unless a class changes it."""

    part: str
    layer: int
    stage: ClassVar[int] = 0

    def check(self, lm: LoadedModel) -> None:
        """Raise MhaVizError when ``lm`` has no such call or the values do not fit it."""
        lm.site(self.part, self.layer)

    def pre(self, query: Tensor, key: Tensor, value: Tensor) -> QKV:
        return query, key, value

    def mask(self, attention_mask: Tensor | None, query: Tensor, key: Tensor) -> Tensor | None:
        return attention_mask

    def post(self, out: Tensor) -> Tensor:
        return out


@dataclass(frozen=True, eq=False)
class Rotate(Intervention):
    """Each K/V head's keys and values times its orthogonal R_K, R_V, its query heads' queries by R_K (the scores
    (Q R)(K R)ᵀ = Q Kᵀ unchanged), and their outputs back by R_Vᵀ (2412.20677). r_k, r_v [kv, dh, dh]."""

    r_k: Tensor
    r_v: Tensor
    stage: ClassVar[int] = 0

    def pre(self, query: Tensor, key: Tensor, value: Tensor) -> QKV:
        return rotated(query, key, value, self.r_k, self.r_v)

    def post(self, out: Tensor) -> Tensor:
        rv = self.r_v.to(out.device, out.dtype).repeat_interleave(out.shape[2] // self.r_v.shape[0], 0)  # [h, dh, dh]
        return torch.einsum("bqhe,hde->bqhd", out, rv)  # z_h R_V^T: back to the head's own value basis


@dataclass(frozen=True, eq=False)
class ShareKV(Intervention):
    """Grouped-query attention for this pass: each group's keys and values become the group's mean (shared)."""

    groups: tuple[tuple[int, ...], ...]
    stage: ClassVar[int] = 1

    def check(self, lm: LoadedModel) -> None:
        super().check(lm)
        flat = [int(h) for g in self.groups for h in g]
        if len(set(flat)) != len(flat) or not all(0 <= h < lm.n_kv_heads for h in flat):
            raise MhaVizError(f"K/V head groups must not overlap and are numbered 0 to {lm.n_kv_heads - 1}")

    def pre(self, query: Tensor, key: Tensor, value: Tensor) -> QKV:
        if not self.groups:
            return query, key, value
        return query, shared(key, self.groups), shared(value, self.groups)


@dataclass(frozen=True, eq=False)
class KeyMask(Intervention):
    """Per head, the keys it may read: a key not kept gets the dtype's minimum as its mask entry (its score before
    the softmax), so that head's weights on it are 0 and renormalised over the rest. keep bool [h, k] or
    broadcastable [b, h, q, k] (h query heads). A head that keeps no key of a row reads them all uniformly."""

    keep: Tensor
    stage: ClassVar[int] = 2

    def check(self, lm: LoadedModel) -> None:
        super().check(lm)
        if self.keep.dim() not in (2, 4):
            shape = tuple(self.keep.shape)
            raise MhaVizError(f"a key mask is [heads, keys] or [batch, heads, queries, keys], not {shape}")

    def mask(self, attention_mask: Tensor | None, query: Tensor, key: Tensor) -> Tensor:
        k_len, dtype = int(key.shape[-2]), query.dtype
        low = torch.finfo(dtype).min
        if attention_mask is None:
            base = torch.zeros(1, 1, query.shape[-2], k_len, dtype=dtype, device=query.device)  # [1, 1, q, k]
        elif attention_mask.dtype == torch.bool:  # True: may attend
            base = torch.zeros((), dtype=dtype, device=query.device).masked_fill(~attention_mask[..., :k_len], low)
        else:
            base = attention_mask[..., :k_len]  # [b, 1|h, q, k]
        keep = self.keep.to(query.device, torch.bool)
        keep = keep[None, :, None, :] if keep.dim() == 2 else keep  # [1|b, h, 1|q, k]
        return torch.where(keep, base, torch.full((), low, dtype=base.dtype, device=base.device))  # [b, h, q, k]


@dataclass(frozen=True, eq=False)
class CacheMask(KeyMask):
    """A compressed key/value cache (studies/kv_lens.py): the queries from position ``start`` on read, per head,
    only the kept keys among the first P, and every key after them; earlier queries (the prefill that made the cache)
    read all. keep bool [h, P] (h query heads). Built per call, so no [h, q, k] mask is held between layers."""

    start: int = 0

    def check(self, lm: LoadedModel) -> None:
        super().check(lm)
        if self.keep.dim() != 2:
            raise MhaVizError(f"a cache mask is [heads, prefix keys], not {tuple(self.keep.shape)}")

    def mask(self, attention_mask: Tensor | None, query: Tensor, key: Tensor) -> Tensor:
        keep = self.keep.to(query.device, torch.bool)  # [h, P]
        h, p, k_len = int(keep.shape[0]), int(keep.shape[1]), int(key.shape[-2])
        cols = torch.cat([keep[:, :k_len], keep.new_ones(h, max(0, k_len - p))], 1)  # [h, k]
        before = torch.arange(query.shape[-2], device=query.device) < self.start  # [q]
        full = before[None, :, None] | cols[:, None, :]  # [h, q, k]
        return KeyMask(self.part, self.layer, full[None]).mask(attention_mask, query, key)


@dataclass(frozen=True, eq=False)
class Ablate(Intervention):
    """These heads zeroed on their way into W^O."""

    heads: tuple[int, ...]
    stage: ClassVar[int] = 3

    def check(self, lm: LoadedModel) -> None:
        super().check(lm)
        bad = [h for h in self.heads if not 0 <= int(h) < lm.n_heads]
        if bad:
            raise MhaVizError(f"head {bad[0]} does not exist; heads are numbered 0 to {lm.n_heads - 1}")

    def post(self, out: Tensor) -> Tensor:
        if not self.heads:
            return out
        out = out.clone()
        out[:, :, sorted({int(h) for h in self.heads}), :] = 0  # [b, q, h, dh]
        return out


@dataclass(frozen=True, eq=False)
class HeadMask(Intervention):
    """Each token's heads multiplied by a fixed mask on their way into W^O (0: that head zeroed for that token).
    keep [q, h]."""

    keep: Tensor
    stage: ClassVar[int] = 4

    def post(self, out: Tensor) -> Tensor:
        return out * self.keep.to(out.device, out.dtype)[None, :, :, None]  # [b, q, h, dh]


@dataclass(frozen=True, eq=False)
class Route(Intervention):
    """Each token's heads multiplied by a mask computed from the heads' outputs in this pass (mixture of heads):
    gate(out [b, q, h, dh]) -> [b, q, h], or None for no change."""

    gate: Callable[[Tensor], Tensor | None]
    stage: ClassVar[int] = 5

    def post(self, out: Tensor) -> Tensor:
        routed = self.gate(out)
        return out if routed is None else out * routed.to(out.device, out.dtype)[..., None]  # [b, q, h, dh]


@dataclass(frozen=True, eq=False)
class Replace(Intervention):
    """Values put in place of what the model computed (activation patching): ``what`` "q", "k", "v" (after rotary
    embeddings, k and v per K/V head) before the model's attention, "out" after it. The tensor becomes
    torch.where(where, values, tensor) (both broadcast to it), or with ``where`` None tensor + values (a zero
    tensor that requires grad: the gradient at that activation)."""

    what: str
    values: Tensor
    where: Tensor | None = None
    stage: ClassVar[int] = 6

    def check(self, lm: LoadedModel) -> None:
        super().check(lm)
        if self.what not in WHATS:
            raise MhaVizError(f"{self.what!r} cannot be replaced; choose q, k, v or out")

    def _put(self, t: Tensor) -> Tensor:
        values = self.values.to(device=t.device, dtype=t.dtype)
        return t + values if self.where is None else torch.where(self.where.to(t.device), values, t)

    def pre(self, query: Tensor, key: Tensor, value: Tensor) -> QKV:
        if self.what == "out":
            return query, key, value
        q, k, v = (self._put(t) if n == self.what else t for n, t in (("q", query), ("k", key), ("v", value)))
        return q, k, v

    def post(self, out: Tensor) -> Tensor:
        return self._put(out) if self.what == "out" else out


class Hook(NamedTuple):
    """A Record's hook on one module: ``kind`` "pre" calls fn(module, args, kwargs) before it runs, "post"
    fn(module, args, output) after it; fn files into its Record's store and returns None."""

    module: str  # the module's name in the model (model.get_submodule)
    kind: str
    fn: Callable[..., None]


@dataclass(frozen=True, eq=False)
class Record(Intervention):
    """The base of what records, for one pass, what passes through the model's modules (not only its attention
    calls); keyed by the (part, layer) it is about. It changes nothing: pre, mask and post stay the base's, and no
    attention call gets it (plan_of)."""

    def begin(self, lm: Any) -> tuple[Any, tuple[Hook, ...]]:
        """A fresh store for one pass and the hooks that fill it (watch.watching registers them for that pass)."""
        raise NotImplementedError


Plan = dict[tuple[str, int], tuple[Intervention, ...]]


def plan_of(interventions: Iterable[Intervention]) -> Plan:
    """(part, layer) -> that call's interventions in stage order (the order given among equal stages); Records
    are not a call's (their hooks are on modules: watch.py)."""
    plan: dict[tuple[str, int], list[Intervention]] = {}
    for i in interventions:
        if isinstance(i, Record):
            continue
        plan.setdefault((i.part, int(i.layer)), []).append(i)
    return {key: tuple(sorted(steps, key=lambda s: s.stage)) for key, steps in plan.items()}


def rotated(query: Tensor, key: Tensor, value: Tensor, r_k: Tensor, r_v: Tensor) -> QKV:
    """Each K/V head's keys and values times its orthogonal R_K, R_V, and each query head's queries times its K/V
    head's R_K: the scores (Q R)(K R)ᵀ = Q Kᵀ are unchanged. Shapes: query [b, h, q, dh]; key, value
    [b, kv, k, dh]; r_k, r_v [kv, dh, dh]."""
    r_k, r_v = r_k.to(key.device, key.dtype), r_v.to(key.device, key.dtype)
    rq = r_k.repeat_interleave(query.shape[1] // r_k.shape[0], 0)  # [h, dh, dh]
    return (torch.einsum("bhqd,hde->bhqe", query, rq), torch.einsum("bkpd,kde->bkpe", key, r_k),
            torch.einsum("bkpd,kde->bkpe", value, r_v))  # fmt: skip


def shared(t: Tensor, groups: Sequence[Sequence[int]]) -> Tensor:
    """``t`` with each group's K/V heads replaced by their mean (a new tensor): the pooled head every member's
    query heads read. Exact for a linear projection (and after rotary embeddings, the same rotation for every head).
    Shapes: t [b, n_kv_heads, pos, d_head] -> the same."""
    out = t.clone()
    for g in groups:
        out[:, list(g)] = t[:, list(g)].mean(1, keepdim=True)  # [b, |g|, pos, d_head]
    return out

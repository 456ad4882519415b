"""The attention implementation mha-viz registers with transformers: the model does the math, we record it.

Every model is loaded with ``attn_implementation=NAME``. The registered function calls the model's own
eager attention (``eager_attention_forward`` of its modeling module), so the model computes exactly what
it computes with "eager". Only while a Recorder is active *in the calling context* (a ContextVar: each
thread, so each app session, has its own) does it record what the model used — q, k, v after rotary
embeddings and QK-norm, the mask as applied, the scaling, soft-cap and position bias — check our own
recomputation against the model's weights. What an experiment does to a call (zero heads, patch values, share
K/V, rotate, route, mask keys per head) is an intervention (interventions.py) applied around the model's own
attention: their ``pre`` steps, the model's eager attention, their ``post`` steps, then the record.
Two requests tracing through the same shared model at once never see each other's tensors, and no lock
is needed: nothing per-request is stored on the model.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from mha_viz.config import TILE_CHECK_ROWS
from mha_viz.models.call import Call
from mha_viz.models.fused import fused_call
from mha_viz.models.interventions import Intervention
from mha_viz.models.masks import converting, long_mask, mask_key
from mha_viz.models.self_check import self_check
from mha_viz.models.tiled import Tiled, tiled_eager
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
    "cross"); ``plan`` maps (part, layer) to what is done to that call for this pass only."""

    parts: Mapping[int, str] = field(default_factory=dict)
    # (part, layer) -> that call's interventions in stage order (interventions.plan_of), for this pass only
    plan: Mapping[tuple[str, int], tuple[Intervention, ...]] = field(default_factory=dict)
    keep: bool = True  # False: only ablate, record nothing (whole-model runs)
    only: tuple[str, int] | None = None  # record only this (part, layer); None: every call
    stop: bool = False  # with ``only``: end the pass (StopForward) once that layer's W^O output is filed
    extras: bool = True  # False: only what the pattern needs (q, k, v, bias, mask); no X, W^O in/out, pre-rotary
    tile_cells: int = 0  # > 0: each call also keeps its checked pattern's block means, at most this many per side
    # > 0: a call with more scores (h × q × k) than this runs a block of query rows of at most this many at a time
    # (models/tiled.py: never a whole [h, n, n]); its rows' softmax statistics are kept (Call.row_lse)
    tile_block: int = 0
    check_rows: int = 0  # a long call's self-check: this many rows of a fused call, of each eager block (0: all)
    progress: Callable[[int], None] | None = None  # told the number of attention calls made so far, after each one
    made: int = 0  # attention calls made in this pass (recorded or not)
    calls: list[Call] = field(default_factory=list)
    masks: dict[int, tuple] = field(default_factory=dict)  # id(mask) -> (mask, k_len, split, its allowed on the CPU)
    causal: dict[int, tuple] = field(default_factory=dict)  # id(mask) -> (mask, (q_len, k_len), exactly causal?)
    # a long call's boolean mask (models/masks.py): its storage -> (mask, the float dtype eager_mask would have used)
    bool_masks: dict[int, tuple[torch.Tensor, torch.dtype]] = field(default_factory=dict)
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
    steps = rec.plan.get((part, layer), ())  # this call's interventions, in stage order (interventions.py)
    for step in steps:
        query, key, value = step.pre(query, key, value)
    for step in steps:
        attention_mask = step.mask(attention_mask, query, key)
    made = rec.bool_masks.get(mask_key(attention_mask))
    if made is not None:  # a long call's boolean mask: the eager function is given eager_mask's blocks of it
        eager = converting(eager, made[1])
    tiled = None
    if rec.tile_block and query.shape[1] * query.shape[-2] * key.shape[-2] > rec.tile_block:
        tiled = _tiled(rec, module, eager, (query, key, value, attention_mask, *args), kwargs, rec.wants(part, layer))
    out, weights = (tiled.out, None) if tiled else eager(module, query, key, value, attention_mask, *args, **kwargs)
    for step in steps:
        out = step.post(out)  # [b, q_pos, n_heads, d_head]
    if again and rec.wants(part, layer) and id(module) in rec.last:
        if rec.extras:  # DiffLlama: the same weights over the second half of V (models/differential.py)
            rec.last[id(module)].v2 = cpu32(value)
    elif rec.wants(part, layer):
        rec.calls.append(_record(rec, module, eager, (query, key, value, attention_mask, *args), kwargs, out, weights))
        if tiled is not None:  # checked block by block; the statistics make any window exact on demand
            call = rec.calls[-1]
            # on the CPU like the rest of the Call (a GPU pass computes them on the device)
            call.row_max, call.row_lse = (None if t is None else t.cpu() for t in (tiled.m, tiled.lse))
            call.delta, call.fused = tiled.delta, tiled.fused
        rec.calls[-1].part, rec.calls[-1].layer = part, layer
        rec.last[id(module)] = rec.calls[-1]
    if not again:
        rec.made += 1
        if rec.progress is not None:
            rec.progress(rec.made)
    return out, weights


def _named(eager: Callable, module: torch.nn.Module, args: tuple, kwargs: dict) -> dict:
    """The eager call's arguments by name (its **kwargs merged in)."""
    sig = _SIGNATURES.get(eager) or _SIGNATURES.setdefault(eager, inspect.signature(eager))
    named = dict(sig.bind(module, *args, **kwargs).arguments)
    named.update(named.pop("kwargs", {}) or {})
    return named


def _tiled(rec: Recorder, module: torch.nn.Module, eager: Callable, args: tuple, kwargs: dict, keep: bool) -> Tiled:
    """A long call a block of query rows at a time (models/fused.py's kernel where it is plain attention, else
    models/tiled.py's eager blocks); recorded (statistics, self-check) if ``keep``. Its pooled tile maps are not
    computed here: any is recomputed on demand from q, k and the statistics (tiles.pooled).
    Shapes: args = (query, key, value, mask, ...) as the eager function takes them."""
    query, key, value, mask = args[:4]
    named = _named(eager, module, args, kwargs)
    got = fused_call(eager, module, query, key, value, mask, args[4:], kwargs, named, rec.tile_block, keep,
                     rec.check_rows if keep else TILE_CHECK_ROWS, 0, rec.causal)  # fmt: skip
    if got is not None:
        return got
    return tiled_eager(eager, module, query, key, value, mask, args[4:], kwargs, rec.tile_block,
                       named if keep else None, rec.check_rows)  # fmt: skip


def _record(
    rec: Recorder, module: torch.nn.Module, eager: Callable, args: tuple, kwargs: dict, out: torch.Tensor, weights
) -> Call:
    named = _named(eager, module, args, kwargs)
    query, key, value, mask = args[:4]
    scaling = named.get("scaling")
    scaling = float(query.shape[-1] ** -0.5 if scaling is None else scaling)
    softcap = named.get("softcap")
    sink = named.get("s_aux")  # gpt-oss: one learned sink logit per head
    bias = named.get("position_bias")
    if isinstance(bias, torch.Tensor) and not bool(bias.any()):
        bias = None  # T5 passes zeros where a layer has no relative position bias (cross-attention)
    seen = rec.masks.get(id(mask))  # every layer is given the same mask tensor: split once (at 8,192 tokens: 64 MB)
    if seen is None or seen[0] is not mask or seen[1] != int(key.shape[-2]):
        split = _split_mask(mask, int(key.shape[-2]))
        kept = None if split[0] is None else split[0].detach().cpu()  # one copy off a GPU for every layer, not 30
        seen = rec.masks[id(mask)] = (mask, int(key.shape[-2]), split, kept)
    extra = seen[2][1]
    bias = extra if bias is None else (bias if extra is None else bias + extra)
    call = Call(
        module_id=id(module),
        q=cpu32(query),
        k=cpu32(key),
        v=cpu32(value),
        scaling=scaling,
        softcap=None if softcap is None else float(softcap),
        bias=None if bias is None else cpu32(bias),
        allowed=seen[3],
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
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(NAME, mha_viz_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, mha_viz_mask)


def mha_viz_mask(*args: object, **kwargs: object) -> torch.Tensor | None:
    """The registered mask function: eager_mask's additive float mask, a boolean one for a long recording's calls
    (models/masks.py)."""
    rec = _ACTIVE.get()
    return long_mask(0 if rec is None else rec.tile_block, {} if rec is None else rec.bool_masks, *args, **kwargs)

"""What differs per architecture, found by looking rather than by a table of families.

One short probe pass (a few tokens) through the freshly loaded model, recorded by capture.py, tells for
every attention module: which part it belongs to (encoder self, decoder self, cross), its layer, which
module is its W^O (the linear map whose input is exactly the concatenated heads: BERT's lives outside
the self-attention module), and whether its Q, K and V are plain linear maps of the module's input
(BERT, GPT-2, OPT, ...: then the what-ifs that rebuild the layer from X are offered) or not (rotary
embeddings, QK-norm: those layers are traced from what the model computed). Every finding is checked
on the probe's own numbers, so a layout this code has never seen is either found or refused — never
guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mha_viz.models.call import Call
from mha_viz.models.capture import Recorder, recording
from mha_viz.models.latent import find_latent
from mha_viz.models.moa import find_moa
from mha_viz.models.offload import linear_in_out
from mha_viz.trace import AttentionWeights, MhaVizError

_CROSS_NAMES = ("encoder_attn", "encdecattention", "crossattention", "cross_attn", "cross_attention")


@dataclass(frozen=True)
class Site:
    """One attention module as the model uses it (names are module paths inside the model)."""

    name: str
    part: str  # "encoder" | "decoder" | "cross"
    layer: int
    wo: str  # the W^O module
    qkv: tuple[str, ...]  # plain-linear Q, K, V modules (one name when fused as Q|K|V); () when not plain
    causal: bool
    pre_rotary: tuple[str, ...] = ()  # (q, k) projections that the model rotates afterwards (rotary, no QK-norm)
    v: str = ""  # the plain-linear V projection where Q and K are not plain ("" when not found or plain)
    pre_wo: bool = False  # the model transforms the concatenated heads before W^O (a gate, a norm): W^O reads
    # something else than concat, recorded at W^O's input
    model_layer: int = -1  # the model's own number for this layer (its layer_idx: differs from ``layer`` in
    # hybrids whose attention layers sit between other kinds of layers); -1 when the model does not say
    latent: tuple[str, str, int] = ("", "", 0)  # latent attention (MLA): (W_UKV, the down-projection, d_rope);
    # ("", "", 0) elsewhere (models/latent.py)
    moa: str = ""  # a mixture of attention heads (JetMoE): the module that routes each token's heads (its router
    # and experts' W^O; models/moa.py); W^O is then ``name`` itself, whose output is the layer's. "" elsewhere


def is_linear(module: torch.nn.Module) -> bool:
    """nn.Linear or GPT-2's Conv1D (a linear map stored [in, out])."""
    return isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"


def _part_of(name: str, encoder_decoder: bool, decoder_only: bool) -> str:
    """The part from the module's path (encoder-decoders) or the whole model's kind (one stack): never from one
    layer's mask, whose window may be shorter than the probe (a sliding layer is no encoder)."""
    low = name.lower()
    if encoder_decoder:
        if any(s in low for s in _CROSS_NAMES):
            return "cross"
        return "decoder" if "decoder" in low else "encoder"
    return "decoder" if decoder_only else "encoder"


def _is_causal(call: Call) -> bool:
    """No query may see a later key, and each sees itself: a causal mask, whole or cut to a window of any width
    (a sliding window shorter than the probe leaves a band under the diagonal, not the whole triangle)."""
    if call.allowed is None or call.q.shape[-2] != call.k.shape[-2] or call.q.shape[-2] < 2:
        return False
    a = call.allowed[0].any(dim=0)  # [q, k]: allowed for some head
    return not bool(a.triu(1).any()) and bool(a.diagonal().all())


def _model_layer(module: torch.nn.Module | None) -> int:
    """The layer number the model gives this attention module (transformers' ``layer_idx``), or -1."""
    idx = getattr(module, "layer_idx", None)
    return int(idx) if isinstance(idx, int) and not isinstance(idx, bool) else -1


def _heads_view(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor | None:
    """A projection's output [b, pos, heads*dh] viewed like ``like`` [b, heads, pos, dh], or None."""
    b, heads, n, dh = like.shape
    if tuple(y.shape) != (b, n, heads * dh):
        return None
    return y.view(b, n, heads, dh).transpose(1, 2)


def _same(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    """Equal up to float rounding (NaN and infinities in the same places count as equal: an overflowing
    layer is still found here, and refused when it is traced)."""
    if a is None or a.shape != b.shape:
        return False
    finite = b[torch.isfinite(b)]
    tol = 1e-6 * (1 + (float(finite.abs().max()) if finite.numel() else 0.0))
    return bool(torch.allclose(a, b, rtol=0.0, atol=tol, equal_nan=True))


def discover(model: torch.nn.Module, inputs: dict, encoder_decoder: bool) -> tuple[Site, ...]:
    """Run ``model`` once on ``inputs`` (a few tokens) and describe every attention module it called."""
    names = {id(m): n for n, m in model.named_modules()}
    modules = {id(m): m for m in model.modules()}
    seen: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # (linear module name, input, output)

    after: dict[str, int] = {}  # linear module name -> attention calls made before it last ran

    def grab(mod: torch.nn.Module, args: tuple, out: torch.Tensor) -> None:
        if args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor):
            seen.append((names[id(mod)], args[0].detach().float().cpu(), out.detach().float().cpu()))
            after[names[id(mod)]] = len(rec.calls)

    rec = Recorder()
    handles = [m.register_forward_hook(grab) for m in model.modules() if is_linear(m)]
    try:
        with torch.no_grad(), recording(rec):
            model(**inputs)
    finally:
        for h in handles:
            h.remove()
    if not rec.calls:
        raise MhaVizError("the model ran without calling transformers' attention interface; it is not supported")
    sites = []
    counts: dict[str, int] = {}
    causal_calls = [_is_causal(call) for call in rec.calls]
    decoder_only = not encoder_decoder and any(causal_calls)  # one stack: all of it is the decoder, or none
    for index, (call, causal) in enumerate(zip(rec.calls, causal_calls, strict=True)):
        name = names.get(call.module_id, "?")
        part = _part_of(name, encoder_decoder, decoder_only)
        wo = next((n for n, i, _ in seen if _same(i, call.wo_in)), None)
        later = [item for item in seen if after.get(item[0], 0) > index]  # ran after this call: may read its heads
        pre_wo = wo is None and (wo := _transformed_wo(name, call, later)) is not None
        mods = {n: modules[i] for i, n in names.items() if n.startswith(name + ".") and i in modules}
        moa = find_moa(name, call, mods) if wo is None else ""
        if moa:  # W^O chosen per token (a mixture of attention heads): the module's own output is the layer's
            wo = name
        if wo is None:
            raise MhaVizError(
                f"no output projection (W^O) of {name}: no one linear map reads its heads after attention, and no "
                "router picks one per token (W^O in groups of heads?); this model is not supported"
            )
        layer = counts.get(part, 0)
        counts[part] = layer + 1
        plain = _plain_qkv(call, seen) if part != "cross" else ()
        rotary = () if plain else _pre_rotary(call, seen)
        v = "" if plain or part == "cross" else _plain_v(call, seen)
        latent = find_latent(name, call, seen, mods) if not plain else ("", "", 0)
        sites.append(Site(name, part, layer, wo, plain, causal, rotary, v, pre_wo,
                          _model_layer(modules.get(call.module_id)), latent, moa))  # fmt: skip
    return tuple(sites)


def _transformed_wo(name: str, call: Call, seen: list[tuple[str, torch.Tensor, torch.Tensor]]) -> str | None:
    """W^O when the model changes the concatenated heads first (BitNet's norm, Qwen3-Next's output gate): the last
    linear map inside the attention module that reads something shaped like the heads side by side and is not a
    q, k or v projection, else None."""
    found = None
    for mod, x, y in seen:
        if not mod.startswith(name + ".") or tuple(x.shape) != tuple(call.wo_in.shape):
            continue
        if any(_same(_heads_view(y, t), t) for t in (call.q, call.k, call.v)):
            continue
        found = mod
    return found


def _plain_qkv(call: Call, seen: list[tuple[str, torch.Tensor, torch.Tensor]]) -> tuple[str, ...]:
    """The modules whose outputs are exactly q, k and v (separate, or one fused Q|K|V), else ()."""
    h, kv, dh = call.q.shape[1], call.k.shape[1], call.q.shape[-1]
    found: dict[str, tuple[str, torch.Tensor]] = {}  # "q" | "k" | "v" -> (module, its input)
    for name, x, y in seen:
        for key, target in (("q", call.q), ("k", call.k), ("v", call.v)):
            if key not in found and _same(_heads_view(y, target), target):
                found[key] = (name, x)
        if y.shape[-1] == (h + 2 * kv) * dh and y.shape[:-1] == call.wo_in.shape[:-1]:
            yq, yk, yv = y.split([h * dh, kv * dh, kv * dh], dim=-1)
            if all(_same(_heads_view(a, t), t) for a, t in ((yq, call.q), (yk, call.k), (yv, call.v))):
                return (name,)
    if len(found) < 3:
        return ()
    # one X for all three: MobileBERT's Q and K read a bottleneck and its V the hidden state (not one layer of X)
    x_q = found["q"][1]
    return tuple(found[k][0] for k in "qkv") if all(_same(found[k][1], x_q) for k in "kv") else ()


def _plain_v(call: Call, seen: list[tuple[str, torch.Tensor, torch.Tensor]]) -> str:
    """The module whose output is exactly v (separate projections only), else ""."""
    return next((name for name, _, y in seen if _same(_heads_view(y, call.v), call.v)), "")


def _norms(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor | None:
    view = _heads_view(y, like)
    return None if view is None else view.norm(dim=-1)  # [b, heads, pos]


def _pre_rotary(call: Call, seen: list[tuple[str, torch.Tensor, torch.Tensor]]) -> tuple[str, ...]:
    """The query and key projections that the model then only rotates: a rotation keeps every head's vector
    length at every position, so their outputs have q's and k's norms but not their values. () when none
    (QK-norm changes the lengths; fused projections are not split here)."""
    found: dict[str, str] = {}
    for name, _, y in seen:
        for key, target in (("q", call.q), ("k", call.k)):
            norms = _norms(y, target)
            if (
                key not in found
                and norms is not None
                and _same(norms, target.norm(dim=-1))
                and not _same(_heads_view(y, target), target)
            ):
                found[key] = name
    return (found["q"], found["k"]) if len(found) == 2 else ()


def plain_weights(model: torch.nn.Module, site: Site, n_heads: int, n_kv: int, scale: float) -> AttentionWeights:
    """A plain-linear layer's weights in our layout (new tensors: the model is never touched).

    Shapes: W_Q [h, d_model, dh]; W_K, W_V [kv, d_model, dh]; W_O [h, dh, d_model].
    """
    if not site.qkv:
        raise MhaVizError(
            "this layer's queries and keys are not plain linear maps of its input (rotary embeddings, QK-norm "
            "or cross-attention), so it cannot be rebuilt from X; the views trace what the model computed"
        )
    mods = [linear_in_out(model.get_submodule(n)) for n in site.qkv]
    if len(mods) == 1:
        ((w, b),) = mods
        d = w.shape[0]
        dh = w.shape[1] // (n_heads + 2 * n_kv)
        sizes = [n_heads * dh, n_kv * dh, n_kv * dh]
        mods = list(zip(w.split(sizes, dim=1), [None] * 3 if b is None else b.split(sizes), strict=True))
    (wq, bq), (wk, bk), (wv, bv) = mods
    d = wq.shape[0]
    dh = wq.shape[1] // n_heads
    w_o, b_o = linear_in_out(model.get_submodule(site.wo))

    def heads(w: torch.Tensor, count: int) -> torch.Tensor:  # [d, count*dh] -> [count, d, dh]
        return w.reshape(d, count, dh).permute(1, 0, 2).contiguous()

    def bias(b: torch.Tensor | None, count: int) -> torch.Tensor | None:
        return None if b is None else b.reshape(count, dh).clone()

    return AttentionWeights(
        W_Q=heads(wq, n_heads), W_K=heads(wk, n_kv), W_V=heads(wv, n_kv),
        W_O=w_o.reshape(n_heads, dh, -1).clone(),
        b_Q=bias(bq, n_heads), b_K=bias(bk, n_kv), b_V=bias(bv, n_kv), b_O=b_o,
        scale=None if abs(scale - dh**-0.5) < 1e-12 else scale,
    )  # fmt: skip

"""Where a layer's input came from, at a few tokens: the residual stream as a sum of its sources (the embeddings,
each earlier head's output through its slice of W^O, each W^O bias, each MLP or MoE output, each post-norm's β),
every norm on the way linear with its scale frozen at the model's own value (frozen_norm.py), checked at every
layer against the model's own hidden states. A residual that does not split this way raises MhaVizError."""

from __future__ import annotations

from typing import NamedTuple

import torch

from mha_viz.models.frozen_norm import close, freeze
from mha_viz.models.load import LoadedModel
from mha_viz.models.offload import linear_in_out
from mha_viz.models.score_record import SourceRecord
from mha_viz.trace import MhaVizError


class Source(NamedTuple):
    """One part of the residual stream: its label, kind ("embed", "head", "attn_bias", "mlp", "norm_bias",
    "proj_bias"), layer (-1: before the first) and head (-1: not a head)."""

    label: str
    kind: str
    layer: int = -1
    head: int = -1


def _is_norm(lm: LoadedModel, name: str) -> bool:
    return "norm" in type(lm.model.get_submodule(name)).__name__.lower()


def _norms(lm: LoadedModel, rec: SourceRecord, lay: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Layer ``lay``'s norms whose input and output were recorded: {name: (input, output)}, each [t, d]."""
    subs = rec.subs.get(lay, {})
    return {n: (i, o) for n, (i, o) in subs.items() if i is not None and _is_norm(lm, n) and not close(i, o)}


def _need(rec: SourceRecord, what: dict, lay: int, name: str) -> torch.Tensor:
    if lay not in what or what[lay] is None:
        raise MhaVizError(f"the pass recorded no {name} at layer {lay}; this architecture is not supported")
    return what[lay]


def _check(parts: torch.Tensor, target: torch.Tensor, what: str) -> None:
    if not close(parts.sum(0), target):
        raise MhaVizError(
            f"{what} is not the sum of the sources found (this architecture's residual stream does not split into "
            "embeddings, heads and MLPs this way); the score split refuses to show a wrong number"
        )


def _heads(lm: LoadedModel, part: str, lay: int, rec: SourceRecord) -> tuple[torch.Tensor, list[Source]]:
    """Layer ``lay``'s heads through their slices of W^O (+ W^O's bias). Returns [h(+1), t, d], their sources."""
    w, b = linear_in_out(lm.model.get_submodule(lm.site(part, lay).wo))  # [h*dh, d], [d]
    o_in = _need(rec, rec.o_in, lay, "W^O input")  # [t, h*dh]
    h, t = lm.n_heads, o_in.shape[0]
    if o_in.shape[-1] != w.shape[0] or w.shape[0] % h:
        raise MhaVizError(f"W^O of layer {lay} does not read the {h} heads side by side; the score split needs it")
    parts = torch.einsum("thd,hde->hte", o_in.view(t, h, -1), w.double().view(h, -1, w.shape[-1]))  # [h, t, d]
    srcs = [Source(f"L{lay}H{i}", "head", lay, i) for i in range(h)]
    if b is not None:
        parts = torch.cat([parts, b.double().expand(1, t, -1)])
        srcs.append(Source(f"L{lay} W^O bias", "attn_bias", lay))
    _check(parts, _need(rec, rec.o_out, lay, "W^O output"), f"W^O's output at layer {lay}")
    return parts, srcs


def _add_bias(parts: torch.Tensor, srcs: list[Source], beta: torch.Tensor | None, src: Source) -> torch.Tensor:
    if beta is None:
        return parts
    srcs.append(src)
    return torch.cat([parts, beta[None]])


def _rest(lm: LoadedModel, rec: SourceRecord, lay: int, rest: torch.Tensor) -> torch.Tensor:
    """The recorded output of layer ``lay``'s module nearest to ``rest`` (its MLP or MoE): exact, not a difference."""
    subs = rec.subs.get(lay, {})
    best = min(subs.values(), key=lambda io: float((io[1] - rest).norm()), default=None)
    if best is None:
        raise MhaVizError(f"no MLP output was recorded at layer {lay}; the score split does not cover this layer")
    return best[1]


def _number(module: str) -> int:
    return int(module.rsplit(".", 1)[-1])


def _first_label(rec: SourceRecord) -> str:
    """ "embeddings", or, where the first softmax-attention layer is not the model's first layer (Qwen3-Next: linear
    attention layers come first), what that input also holds: those layers, not split."""
    first = _number(rec.layers[0])
    before = "layer 0" if first == 1 else f"layers 0–{first - 1}"
    return "embeddings" if first == 0 else f"embeddings + {before} (no softmax attention, not split)"


def _no_gap(rec: SourceRecord, lay: int) -> None:
    """Refuse a split across layers that are not softmax attention (their output is not split into heads)."""
    a, b = _number(rec.layers[lay]), _number(rec.layers[lay + 1])
    if b != a + 1:
        raise MhaVizError(
            f"layers {a + 1}–{b - 1} of the model, between its attention layers {lay} and {lay + 1}, are not softmax "
            f"attention (linear attention?) and are not split; the score split covers attention layers 0–{lay} here"
        )


def residual_sources(lm: LoadedModel, part: str, layer: int, rec: SourceRecord) -> tuple[torch.Tensor, list[Source]]:
    """The input of layer ``layer`` of ``part`` at the recorded tokens as a sum of sources.
    Shapes: returns [n_sources, t, d] (float64) and the n_sources sources."""
    parts = _need(rec, rec.h_in, 0, "layer input")[None]  # [1, t, d]
    srcs = [Source(_first_label(rec), "embed")]
    for lay in range(layer):
        _no_gap(rec, lay)
        norm_io = _norms(lm, rec, lay)
        heads, head_srcs = _heads(lm, part, lay, rec)
        o_out = rec.o_out[lay]
        sandwich = [n for n, (i, _) in norm_io.items() if close(i, o_out)]
        added = o_out
        if sandwich:  # Gemma 2, OLMo 2: a norm on the attention's output before the residual adds it
            i, added = norm_io.pop(sandwich[0])
            heads, beta = freeze(lm.model.get_submodule(sandwich[0]), i, added, heads, sandwich[0])
            heads = _add_bias(heads, head_srcs, beta, Source(f"L{lay} attention-out norm β", "norm_bias", lay))
        h_next = _need(rec, rec.h_in, lay + 1, "layer input")
        post2 = [n for n, (_, o) in norm_io.items() if close(o, h_next)]
        parts, srcs = torch.cat([parts, heads]), srcs + head_srcs
        if not post2:  # pre-norm: the residual adds the attention's output, then the MLP's
            mlp = _rest(lm, rec, lay, h_next - parts.sum(0))
        else:  # post-norm (BERT): LayerNorm(x + attention), then LayerNorm(that + MLP)
            mid = _need(rec, rec.h_in, lay, "layer input") + added
            post1 = [n for n, (i, _) in norm_io.items() if close(i, mid) and n not in post2]
            if not post1:
                raise MhaVizError(f"layer {lay} ends in a norm but no norm follows its attention; not supported")
            i1, o1 = norm_io[post1[0]]
            parts, beta = freeze(lm.model.get_submodule(post1[0]), i1, o1, parts, post1[0])
            parts = _add_bias(parts, srcs, beta, Source(f"L{lay} attention LayerNorm β", "norm_bias", lay))
            i2, o2 = norm_io[post2[0]]
            mlp = _rest(lm, rec, lay, i2 - parts.sum(0))
        parts = torch.cat([parts, mlp[None]])
        srcs.append(Source(f"L{lay} MLP", "mlp", lay))
        if post2:
            parts, beta = freeze(lm.model.get_submodule(post2[0]), i2, o2, parts, post2[0])
            parts = _add_bias(parts, srcs, beta, Source(f"L{lay} output LayerNorm β", "norm_bias", lay))
        _check(parts, h_next, f"the input of layer {lay + 1}")
    _check(parts, _need(rec, rec.h_in, layer, "layer input"), f"the input of layer {layer}")
    return parts, srcs


def attention_input(
    lm: LoadedModel, layer: int, rec: SourceRecord, parts: torch.Tensor, srcs: list[Source]
) -> tuple[torch.Tensor, list[Source]]:
    """The attention module's input as the same sources, through the layer's pre-norm frozen (none in post-norm
    models). Shapes: parts [n, t, d] -> [n(+1), t, d]."""
    h, x = rec.h_in[layer], _need(rec, rec.x, layer, "attention input")
    if close(x, h):
        return parts, srcs
    found = [n for n, (i, o) in _norms(lm, rec, layer).items() if close(i, h) and close(o, x)]
    if not found:
        raise MhaVizError(f"the attention of layer {layer} reads its input through something other than one norm")
    i, o = rec.subs[layer][found[0]]
    parts, beta = freeze(lm.model.get_submodule(found[0]), i, o, parts, found[0])
    srcs = list(srcs)
    return _add_bias(parts, srcs, beta, Source(f"L{layer} input-norm β", "norm_bias", layer)), srcs

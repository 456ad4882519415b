"""Per-architecture adapters: a pretrained layer's weights in our layout, and one model run.

Reads module attributes only (no transformers import) and never modifies the model: weights
are copied into new tensors, and hooks are removed after each run.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from mha_viz.loading import LoadedModel
from mha_viz.trace import AttentionWeights, MhaVizError

# The model is shared by every session of the app. Hooks are attached to it for the length of one
# forward pass; the lock keeps two sessions' hooked passes from running at once (and seeing each
# other's hooks).
_HOOK_LOCK = threading.Lock()


def base_model(lm: LoadedModel) -> torch.nn.Module:
    """The transformer inside a causal-LM wrapper (GPT2LMHeadModel.transformer, LlamaForCausalLM.model)."""
    m = lm.model
    if lm.family == "gpt2":
        return getattr(m, "transformer", m)
    if lm.family == "llama":
        return m.model if hasattr(m, "lm_head") else m
    return m


def _layers(lm: LoadedModel) -> list[torch.nn.Module]:
    m = base_model(lm)
    if lm.family == "bert":
        return list(m.encoder.layer)
    if lm.family == "distilbert":
        return list(m.transformer.layer)
    if lm.family == "llama":
        return list(m.layers)
    return list(m.h)  # gpt2


def _modules(lm: LoadedModel, layer: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(the attention module whose input is the layer's X, the W^O projection module)."""
    block = _layers(lm)[layer]
    if lm.family == "bert":
        return block.attention.self, block.attention.output.dense
    if lm.family == "distilbert":
        return block.attention, block.attention.out_lin
    if lm.family == "llama":
        return block.self_attn, block.self_attn.o_proj
    return block.attn, block.attn.c_proj


def check_layer(lm: LoadedModel, layer: int) -> int:
    """The layer index if valid, else a clear error naming the valid range."""
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < lm.n_layers:
        raise MhaVizError(f"layer {layer} does not exist; {lm.name} has layers 0 to {lm.n_layers - 1}")
    return layer


def _heads_in(weight_in_out: torch.Tensor, h: int) -> torch.Tensor:
    """[d_model, h*dh] (in x out) -> [h, d_model, dh]."""
    d = weight_in_out.shape[0]
    return weight_in_out.reshape(d, h, -1).permute(1, 0, 2).contiguous()


def layer_weights(lm: LoadedModel, layer: int) -> AttentionWeights:
    """Layer ``layer``'s attention weights as a new AttentionWeights on the CPU (float32).

    Shapes: nn.Linear weights are [out, in] (transposed here); GPT-2's Conv1D are [in, out].
    """
    check_layer(lm, layer)
    h, d = lm.n_heads, lm.d_model
    block = _layers(lm)[layer]
    if lm.family == "llama":
        return _llama_weights(block.self_attn, h, lm.n_kv_heads or h, lm.rope_theta)
    if lm.family == "gpt2":
        attn = block.attn
        w = attn.c_attn.weight.detach().float().cpu()  # [d, 3d] in x out
        b = attn.c_attn.bias.detach().float().cpu()  # [3d]
        wq, wk, wv = w.split(d, dim=1)  # each [d, d]
        bq, bk, bv = b.split(d)  # each [d]
        w_o = attn.c_proj.weight.detach().float().cpu()  # [d, d] in x out
        b_o = attn.c_proj.bias.detach().float().cpu()  # [d]
        scale = float(attn.scaling)
    else:
        if lm.family == "bert":
            lq, lk, lv = block.attention.self.query, block.attention.self.key, block.attention.self.value
            lo = block.attention.output.dense
        else:
            a = block.attention
            lq, lk, lv, lo = a.q_lin, a.k_lin, a.v_lin, a.out_lin
        wq, wk, wv, w_o = (m.weight.detach().float().cpu().T for m in (lq, lk, lv, lo))  # [in, out]
        bq, bk, bv, b_o = (m.bias.detach().float().cpu() for m in (lq, lk, lv, lo))
        scale = None
    dh = d // h
    return AttentionWeights(
        W_Q=_heads_in(wq, h), W_K=_heads_in(wk, h), W_V=_heads_in(wv, h),
        W_O=w_o.reshape(h, dh, d).clone(),
        b_Q=bq.reshape(h, dh).clone(), b_K=bk.reshape(h, dh).clone(), b_V=bv.reshape(h, dh).clone(),
        b_O=b_o.clone(),
        scale=None if scale is None or abs(scale - dh**-0.5) < 1e-12 else scale,
    )  # fmt: skip


def _llama_weights(attn: torch.nn.Module, h: int, kv: int, rope_theta: float | None) -> AttentionWeights:
    """LLaMA-style q/k/v/o_proj (nn.Linear, [out, in]; biases optional) with grouped K/V heads."""

    def part(lin: torch.nn.Module, heads: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        w = lin.weight.detach().float().cpu().T  # [d_model, heads*dh]
        b = None if lin.bias is None else lin.bias.detach().float().cpu().reshape(heads, -1).clone()
        return _heads_in(w, heads), b

    (wq, bq), (wk, bk), (wv, bv) = part(attn.q_proj, h), part(attn.k_proj, kv), part(attn.v_proj, kv)
    o = attn.o_proj
    dh = wq.shape[2]
    w_o = o.weight.detach().float().cpu().T.reshape(h, dh, -1).clone()  # [h, dh, d_model]
    b_o = None if o.bias is None else o.bias.detach().float().cpu().clone()
    scale = float(attn.scaling)
    return AttentionWeights(
        W_Q=wq, W_K=wk, W_V=wv, W_O=w_o, b_Q=bq, b_K=bk, b_V=bv, b_O=b_o,
        scale=None if abs(scale - dh**-0.5) < 1e-12 else scale, rope_theta=rope_theta,
    )  # fmt: skip


@dataclass(frozen=True, eq=False)
class ModelRun:
    """What every attention layer saw and produced in one forward pass (detached, CPU, float32).

    Shapes: attn_inputs[l] [batch, pos, d_model] (X of layer l; after ln_1 for GPT-2);
    attentions[l] [batch, n_heads, pos, pos] (the model's own probabilities);
    attn_outputs[l] [batch, pos, d_model] (through W^O, before residual and LayerNorm).
    """

    attn_inputs: tuple[torch.Tensor, ...]
    attentions: tuple[torch.Tensor, ...]
    attn_outputs: tuple[torch.Tensor, ...]


def run_model(lm: LoadedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> ModelRun:
    """One forward pass with output_attentions, capturing each layer's X and W^O output by hooks.

    Shapes: input_ids [batch, pos] long; attention_mask [batch, pos] (1 = token, 0 = padding).
    """
    inputs: dict[int, torch.Tensor] = {}
    outputs: dict[int, torch.Tensor] = {}
    handles = []

    def grab_in(i: int):
        def hook(_mod, args, kwargs):
            x = args[0] if args else kwargs.get("hidden_states")
            inputs[i] = x.detach().float().cpu()

        return hook

    def grab_out(i: int):
        def hook(_mod, _args, out):
            outputs[i] = out.detach().float().cpu()

        return hook

    with _HOOK_LOCK:
        try:
            for i in range(lm.n_layers):
                attn_mod, wo_mod = _modules(lm, i)
                handles.append(attn_mod.register_forward_pre_hook(grab_in(i), with_kwargs=True))
                handles.append(wo_mod.register_forward_hook(grab_out(i)))
            out = _forward(lm, input_ids, attention_mask, output_attentions=True)
        finally:
            for hd in handles:
                hd.remove()
    attentions = tuple(a.detach().float().cpu() for a in out.attentions)
    if len(attentions) != lm.n_layers or len(inputs) != lm.n_layers:
        raise MhaVizError(f"{lm.name} returned no attention weights; it must be loaded with eager attention")
    return ModelRun(
        attn_inputs=tuple(inputs[i] for i in range(lm.n_layers)),
        attentions=attentions,
        attn_outputs=tuple(outputs[i] for i in range(lm.n_layers)),
    )


def _forward(lm: LoadedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, **flags: bool):
    dev = lm.device
    with torch.no_grad():
        return lm.model(
            input_ids=input_ids.to(dev),
            attention_mask=None if attention_mask is None else attention_mask.to(dev),
            **flags,
        )


@dataclass(frozen=True, eq=False)
class ModelOutput:
    """What the whole model produces. Shapes: hidden [batch, pos, d_model] (last layer);
    logits [batch, pos, vocab] for causal LMs, else None."""

    hidden: torch.Tensor
    logits: torch.Tensor | None


def run_ablated(
    lm: LoadedModel,
    input_ids: torch.Tensor,
    ablate: Mapping[int, Sequence[int]] | None = None,
    attention_mask: torch.Tensor | None = None,
) -> ModelOutput:
    """Run the whole model with chosen heads zeroed: {layer: [heads]} (empty or None: no ablation).

    Each ablated head's slice of the concatenated heads is zeroed on its way into W^O, by a
    forward pre-hook for this pass only; the shared weights are never touched.
    Shapes: input_ids [batch, pos].
    """
    ablate = {int(k): sorted({int(h) for h in v}) for k, v in (ablate or {}).items() if v}
    handles = []

    def zero_heads(heads: list[int]):
        def hook(_mod, args):
            (concat, *rest) = args  # [batch, pos, n_heads * d_head]
            dh = concat.shape[-1] // lm.n_heads
            concat = concat.clone()
            for h in heads:
                concat[..., h * dh : (h + 1) * dh] = 0
            return (concat, *rest)

        return hook

    for layer, heads in ablate.items():
        check_layer(lm, layer)
        bad = [h for h in heads if not 0 <= h < lm.n_heads]
        if bad:
            raise MhaVizError(f"head {bad[0]} does not exist; heads are numbered 0 to {lm.n_heads - 1}")
    with _HOOK_LOCK:
        try:
            for layer, heads in ablate.items():
                _, wo_mod = _modules(lm, layer)
                handles.append(wo_mod.register_forward_pre_hook(zero_heads(heads)))
            out = _forward(lm, input_ids, attention_mask, output_hidden_states=True)
        finally:
            for hd in handles:
                hd.remove()
    logits = getattr(out, "logits", None)
    return ModelOutput(
        hidden=out.hidden_states[-1].detach().float().cpu(),
        logits=None if logits is None else logits.detach().float().cpu(),
    )


def token_embeddings(lm: LoadedModel, ids: tuple[int, ...], positions: bool = False) -> torch.Tensor:
    """The model's input embeddings of ``ids`` (plus its position embeddings if asked), copied.

    Shapes: returns [len(ids), d_model] float32 on the CPU.
    """
    m = base_model(lm)
    if lm.family == "gpt2":
        words, pos = m.wte, m.wpe
    elif lm.family == "llama":
        words, pos = m.embed_tokens, None  # positions enter through rotary embeddings, not X
    else:
        words, pos = m.embeddings.word_embeddings, m.embeddings.position_embeddings
    index = torch.tensor(ids, dtype=torch.long, device=words.weight.device)  # [n]
    with torch.no_grad():
        x = words(index)  # [n, d_model]
        if positions and pos is not None:
            x = x + pos(torch.arange(len(ids), device=index.device))
    return x.detach().float().cpu().clone()

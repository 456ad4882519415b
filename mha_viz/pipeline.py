"""From (model, text, settings) to traces: the one path shared by the CLI and the dashboard."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mha_viz.adapters import check_layer, layer_weights, run_ablated, run_model, token_embeddings
from mha_viz.analysis import head_roles, head_stats, is_punctuation
from mha_viz.attention import compute_trace
from mha_viz.edits import ablate_heads, apply_wo, regroup_heads, scale_heads
from mha_viz.loading import LoadedModel, Tokens, readable, tokenize
from mha_viz.own import init_weights, random_embeddings
from mha_viz.trace import AttentionTrace, AttentionWeights, MhaVizError

EMBEDDINGS = ("random", "model")


@dataclass(frozen=True)
class Settings:
    """How to edit the layer and run the trace (plain values, so they make obvious cache keys)."""

    heads: int | None = None  # re-split into this many heads (None: as the layer has them)
    wo: str = "learned"  # "learned" | "identity" | "random"
    ablate: tuple[int, ...] = ()  # heads (after re-split) whose W^O block is zeroed
    head_scale: tuple[tuple[int, float], ...] = ()  # (head, factor) pairs multiplying W^O blocks
    causal: bool = False  # add a causal mask (decoders always have one)
    scaled: bool = True  # multiply scores by 1/sqrt(d_head)
    seed: int = 0  # for W^O = random
    device: str = "auto"
    dtype: str = "float32"


@dataclass(frozen=True)
class OwnSpec:
    """Own weights: made from (d_model, n_heads, seed, init) or given (loaded from a file)."""

    d_model: int = 512
    n_heads: int = 8
    seed: int = 0
    init: str = "xavier"
    bias: bool = False
    embeddings: str = "random"  # "random" (seeded per token id) | "model" (the tokenizer model's)
    positions: bool = False  # add position embeddings (sinusoidal for random, the model's otherwise)
    weights: AttentionWeights | None = field(default=None, compare=False)

    def build(self) -> AttentionWeights:
        if self.weights is not None:
            return self.weights
        return init_weights(self.d_model, self.n_heads, self.seed, self.init, self.bias)


def edit_weights(weights: AttentionWeights, settings: Settings) -> AttentionWeights:
    """Apply the what-if edits in order: re-split heads, the W^O variant, head scaling, ablation."""
    w = weights if settings.heads is None else regroup_heads(weights, settings.heads)
    w = apply_wo(w, settings.wo, settings.seed)
    if settings.head_scale:
        w = scale_heads(w, dict(settings.head_scale))
    return ablate_heads(w, settings.ablate) if settings.ablate else w


def pretrained_traces(
    lm: LoadedModel, text: str, layers: Sequence[int] | None = None, settings: Settings = Settings()
) -> tuple[Tokens, list[AttentionTrace]]:
    """Tokenise ``text``, run the model once, and trace the chosen layers (all by default)."""
    tokens = tokenize(lm, text)
    chosen = list(range(lm.n_layers)) if layers is None else [check_layer(lm, i) for i in layers]
    run = run_model(lm, torch.tensor([tokens.ids]))
    traces = [
        compute_trace(
            edit_weights(layer_weights(lm, i), settings),
            run.attn_inputs[i][0],  # [pos, d_model]
            tokens.labels,
            causal=lm.causal or settings.causal,
            scaled=settings.scaled,
            device=settings.device,
            dtype=settings.dtype,
        )
        for i in chosen
    ]
    return tokens, traces


def own_input(lm: LoadedModel, tokens: Tokens, spec: OwnSpec, d_model: int) -> torch.Tensor:
    """X for own weights. Shapes: returns [pos, d_model]."""
    if spec.embeddings == "random":
        return random_embeddings(list(tokens.ids), d_model, spec.seed, spec.positions)
    if spec.embeddings != "model":
        raise MhaVizError(f"unknown embeddings {spec.embeddings!r}; choose one of {', '.join(EMBEDDINGS)}")
    if d_model != lm.d_model:
        raise MhaVizError(
            f"{lm.name}'s embeddings have {lm.d_model} dimensions but d_model is {d_model}; "
            f"set d_model to {lm.d_model} or use random embeddings"
        )
    return token_embeddings(lm, tokens.ids, spec.positions)


def own_trace(
    lm: LoadedModel, text: str, spec: OwnSpec = OwnSpec(), settings: Settings = Settings()
) -> tuple[Tokens, AttentionWeights, AttentionTrace]:
    """Trace own weights on ``text`` tokenised by ``lm``'s tokenizer.

    ``settings.heads`` is ignored here: for own weights the head count is part of OwnSpec.
    """
    tokens = tokenize(lm, text)
    base = spec.build()
    weights = edit_weights(base, dataclasses.replace(settings, heads=None))
    x = own_input(lm, tokens, spec, base.d_model)
    trace = compute_trace(
        weights, x, tokens.labels,
        causal=settings.causal, scaled=settings.scaled, device=settings.device, dtype=settings.dtype,
    )  # fmt: skip
    return tokens, weights, trace


def headcount_sweep(
    weights: AttentionWeights, x: torch.Tensor, counts: Sequence[int], settings: Settings = Settings()
) -> dict[str, list[float]]:
    """Re-split the same projections into each head count and summarise the result.

    For each count: mean row entropy (nats), mean largest weight per row, and the relative change of
    the layer output against the weights as given (|out' - out| / |out| over all tokens).
    Shapes: x [pos, d_model].
    """

    def run(w: AttentionWeights) -> AttentionTrace:
        return compute_trace(
            w, x, causal=settings.causal, scaled=settings.scaled, device=settings.device, dtype=settings.dtype
        )

    base = run(weights).output
    rows: dict[str, list[float]] = {"heads": [], "mean_entropy": [], "mean_max_weight": [], "output_change": []}
    for h in counts:
        t = run(regroup_heads(weights, int(h)))
        stats = head_stats(t.pattern.numpy())
        rows["heads"].append(int(h))
        rows["mean_entropy"].append(float(stats["entropy"].mean()))
        rows["mean_max_weight"].append(float(stats["max_weight"].mean()))
        rows["output_change"].append(float((t.output - base).norm() / base.norm().clamp_min(1e-12)))
    return rows


def single_head_identity_check(weights: AttentionWeights, x: torch.Tensor) -> float:
    """Max |difference| between MHA with h = 1 and W^O = I, and plain single-head self-attention.

    Plain: softmax(X W_Q (X W_K)^T / sqrt(d)) X W_V with the layer's own (concatenated) projections
    and biases, computed directly in float64. Shapes: x [pos, d_model].
    """
    one = apply_wo(regroup_heads(weights, 1), "identity")
    mha = compute_trace(one, x, device="cpu", dtype="float64").output  # [pos, d]
    w = one.to("cpu", torch.float64)
    xd = x.to(torch.float64)

    def proj(wm: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return xd @ wm[0] + (0 if b is None else b[0])  # [pos, d]

    q, k, v = proj(w.W_Q, w.b_Q), proj(w.W_K, w.b_K), proj(w.W_V, w.b_V)
    plain = torch.softmax(q @ k.T * w.scale_factor, dim=-1) @ v  # [pos, d]
    return float((mha - plain).abs().max())


def all_patterns(lm: LoadedModel, text: str, settings: Settings = Settings()) -> tuple[Tokens, np.ndarray]:
    """Every layer's attention pattern. Shapes: returns [n_layers, n_heads, pos, pos] float32."""
    tokens, traces = pretrained_traces(lm, text, None, settings)
    return tokens, np.stack([t.pattern.numpy() for t in traces]).astype(np.float32)


def roles_table(tokens: Tokens, patterns: np.ndarray) -> list[dict]:
    """One row per (layer, head): the role scores of analysis.head_roles and the label.

    Shapes: patterns [n_layers, n_heads, pos, pos].
    """
    special = np.asarray(tokens.special, dtype=bool)
    punct = np.asarray([is_punctuation(p) for p in tokens.pieces], dtype=bool)
    names = [p for p, s in zip(tokens.pieces, tokens.special, strict=True) if s]
    rows = []
    for layer, pattern in enumerate(patterns):
        r = head_roles(pattern, special, punct, names)
        for head in range(pattern.shape[0]):
            row = {"layer": layer, "head": head}
            row.update({k: float(r[k][head]) for k in ("prev", "next", "self", "special", "punct", "entropy")})
            row["label"] = str(r["label"][head])
            rows.append(row)
    return rows


def ablation_effect(lm: LoadedModel, text: str, ablate: dict[int, list[int]], top_k: int = 5) -> dict:
    """What the whole model produces with chosen heads zeroed ({layer: [heads]}), against intact.

    Always: per-token relative change of the last hidden states. Encoders: the sentence embedding
    (mean pooling, L2-normalised, as sentence-transformers does) and its cosine to the intact one.
    Causal LMs: the next-token top-k (token, probability) before and after.
    """
    tokens = tokenize(lm, text)
    ids = torch.tensor([tokens.ids])
    intact, cut = run_ablated(lm, ids), run_ablated(lm, ids, ablate)
    h0, h1 = intact.hidden[0].double(), cut.hidden[0].double()  # [pos, d]
    result: dict = {
        "tokens": tokens.labels,
        "token_change": ((h1 - h0).norm(dim=-1) / h0.norm(dim=-1).clamp_min(1e-12)).numpy(),
    }
    if intact.logits is None:
        e0 = torch.nn.functional.normalize(h0.mean(0), dim=0)
        e1 = torch.nn.functional.normalize(h1.mean(0), dim=0)
        result["embedding_cosine"] = float(e0 @ e1)
    else:
        for name, out in (("top_before", intact), ("top_after", cut)):
            probs = torch.softmax(out.logits[0, -1].double(), dim=-1)
            values, idx = probs.topk(min(top_k, probs.shape[0]))
            result[name] = [
                (readable(lm.tokenizer.decode([int(i)])), float(v)) for v, i in zip(values, idx, strict=True)
            ]
    return result

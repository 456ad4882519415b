"""Studies built on the road: head-count sweeps, the one-head check, every layer's pattern, head roles,
whole-model ablation. Each takes what the pipeline returns and returns plain numbers or arrays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.analysis.norms import shown_pattern
from mha_viz.analysis.patterns import head_stats
from mha_viz.analysis.roles import SCORE_KEYS, head_roles, is_punctuation
from mha_viz.attention import compute_trace
from mha_viz.config import Config
from mha_viz.edits import apply_wo, regroup_heads
from mha_viz.models.load import LoadedModel
from mha_viz.models.tokens import Tokens, readable
from mha_viz.pipeline import budget
from mha_viz.pipeline.door import Ablate
from mha_viz.pipeline.road import Recording, encode, layer_trace, sizes
from mha_viz.selection import Selection
from mha_viz.trace import AttentionTrace, AttentionWeights


def headcount_sweep(
    weights: AttentionWeights, x: torch.Tensor, counts: Sequence[int], config: Config | None = None
) -> dict[str, list[float]]:
    """Re-split the same projections into each head count and summarise the result.

    For each count: mean row entropy (nats), mean largest weight per row, and the relative change of
    the layer output against the weights as given (|out' - out| / |out| over all tokens).
    Shapes: x [pos, d_model].
    """
    config = config or Config()
    n = int(x.shape[0])
    most = max(counts, default=weights.n_heads)
    full = budget.Sizes(n, n, weights.n_heads, weights.n_kv_heads, weights.d_head, weights.d_model)
    budget.check("Head count", full if most <= weights.n_heads else budget.Sizes(
        n, n, most, most, max(1, weights.n_heads * weights.d_head // most), weights.d_model))  # fmt: skip

    def run(w: AttentionWeights) -> AttentionTrace:
        return compute_trace(w, x, causal=config.causal, scaled=config.scaled, device=config.device, dtype=config.dtype)

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


def single_head_identity(
    weights: AttentionWeights, x: torch.Tensor, scaled: bool = True, allowed: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """MHA with h = 1 and W^O = I, and plain single-head self-attention, both in float64.

    Plain: softmax(X W_Q (X W_K)^T / sqrt(d)) X W_V with the layer's own (concatenated) projections
    and biases, computed directly. ``scaled=False`` drops the scale from both; ``allowed`` (True = may
    attend) masks both. Shapes: x [pos, d_model]; allowed [pos, pos] bool; returns ([pos, d], [pos, d]).
    """
    one = apply_wo(regroup_heads(weights, 1), "identity")
    mha = compute_trace(one, x, attn_mask=allowed, scaled=scaled, device="cpu", dtype="float64").output  # [pos, d]
    w = one.to("cpu", torch.float64)
    xd = x.to(torch.float64)

    def proj(wm: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return xd @ wm[0] + (0 if b is None else b[0])  # [pos, d]

    q, k, v = proj(w.W_Q, w.b_Q), proj(w.W_K, w.b_K), proj(w.W_V, w.b_V)
    s = q @ k.T * (w.scale_factor if scaled else 1.0)  # [pos, pos]
    if allowed is not None:
        s = s.masked_fill(~allowed.to(torch.bool), float("-inf"))
    plain = torch.softmax(s, dim=-1).nan_to_num(1.0 / s.shape[-1]) @ v  # [pos, d] (all-masked rows: even)
    return mha, plain


def single_head_identity_check(weights: AttentionWeights, x: torch.Tensor) -> float:
    """Max |difference| between MHA with h = 1 and W^O = I, and plain single-head self-attention
    (see single_head_identity)."""
    mha, plain = single_head_identity(weights, x)
    return float((mha - plain).abs().max())


def all_patterns(
    lm: LoadedModel, rec: Recording, part: str | None, config: Config, measure: str = "weight"
) -> np.ndarray:
    """Every layer's attention pattern of one part: the weights, or the row-normalised contributions
    (norms.shown_pattern). Shapes: [n_layers, n_heads, q_pos, k_pos] float32."""
    part = lm.part(part)
    budget.check("Overview", sizes(rec, part, 0, lm.n_layers(part)), what="Every layer's pattern")
    out = None  # filled layer by layer: one [L, H, q, k] array, no list of layers, stacked copy or cast copy
    for i in range(lm.n_layers(part)):
        layer = shown_pattern(layer_trace(lm, rec, part, i, config, x=False), measure)  # [H, q, k]
        if out is None:
            out = np.empty((lm.n_layers(part), *layer.shape), dtype=np.float32)
        out[i] = layer
    return out


def roles_table(tokens: Tokens, patterns: np.ndarray) -> list[dict]:
    """One row per (layer, head): the role scores of roles.head_roles (SCORE_KEYS) and the label.

    Shapes: patterns [n_layers, n_heads, pos, pos].
    """
    special = np.asarray(tokens.special, dtype=bool)
    punct = np.asarray([is_punctuation(p) for p in tokens.pieces], dtype=bool)
    names = [p for p, s in zip(tokens.pieces, tokens.special, strict=True) if s]
    rows = []
    for layer, pattern in enumerate(patterns):
        r = head_roles(pattern, special, punct, names, tokens.ids)
        for head in range(pattern.shape[0]):
            row = {"layer": layer, "head": head}
            row.update({k: float(r[k][head]) for k in SCORE_KEYS})
            row["label"] = str(r["label"][head])
            rows.append(row)
    return rows


def roles_of(lm: LoadedModel, rec: Recording, sel: Selection) -> list[dict]:
    """Every head's roles (roles_table) in the selection's part of ``rec``, its recording of sel.text and sel.target,
    after sel.config's what-ifs, whatever sel.layer (the CLI's roles; the dashboard's get_roles, cached per part)."""
    part = lm.part(sel.part)
    return roles_table(rec.query_tokens(part), all_patterns(lm, rec, part, sel.config))


def ablation_effect(
    lm: LoadedModel,
    text: str,
    ablate: Mapping[tuple[str, int], Sequence[int]],
    target: str | None = None,
    top_k: int = 5,
) -> dict:
    """What the whole model produces with chosen heads zeroed ({(part, layer): heads}), against intact.

    Always: per-token relative change of the last hidden states. Encoders: the sentence embedding
    (mean pooling, L2-normalised, as sentence-transformers does) and its cosine to the intact one.
    Models with an LM head: the next-token top-k (token, probability) before and after.
    """
    tokens, target_tokens = encode(lm, text, target)
    ids = torch.tensor([tokens.ids])
    dec = None if target_tokens is None else torch.tensor([target_tokens.ids])
    intact = pipeline.run(lm, ids, decoder_ids=dec, record=False)
    steps = [Ablate(part, layer, tuple(int(h) for h in heads)) for (part, layer), heads in ablate.items() if heads]
    cut = pipeline.run(lm, ids, *steps, decoder_ids=dec, record=False)
    h0, h1 = intact.hidden[0].double(), cut.hidden[0].double()  # [pos, d]
    result: dict = {
        "tokens": (target_tokens or tokens).labels,
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

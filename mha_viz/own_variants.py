"""Own weights as another attention layer: GQA, MQA, MOHSA, MoH and DCMHA from the same MHA weights (pure torch).

Each variant is built from one multi-head layer's weights (own weights, n_kv_heads = n_heads) and X:

- "mha": plain multi-head attention (the reference).
- "gqa": the K/V heads mean-pooled into g consecutive groups (Ainslie et al. 2023); query head i reads K/V
  group i // (h / g). g = h is MHA exactly; "mqa" is g = 1.
- "mohsa": overlapping heads. Head i reads the columns [i·d_k − w, (i+1)·d_k + w) of the full projections
  X·W_Q, X·W_K, X·W_V, wrapped around d_model (mod d_model), so a head is d_k + 2w wide and shares w columns
  with each neighbour; its scores are scaled by 1/√(d_k + 2w); W^O reads the same wrapped rows, and the output
  is the sum of the heads' z_i · W^O[rows_i] (overlapping columns are counted by every head that reads them).
  w = 0 is MHA exactly. Needs d_k + 2w ≤ d_model.
- "moh": mixture of heads (Jin et al. 2024). A random router W_r [d_model × h] drawn from the seed
  (N(0, 1/d_model)); per token the router scores softmax(x·W_r) [n × h], the top-k heads are kept and the
  output is Σ_{chosen i} g_{t,i} · z_{t,i} · W^O_i (+ b_O), g = the router score ("router" gates) or 1
  ("equal" gates). With k = h and equal gates it is MHA exactly; with k = h and router gates it is MHA with
  head i's W^O block multiplied by g_{t,i} for token t (each token's own head weights).
- "dcmha": composed heads (Xiao et al. 2024, the compose step, here static: the composition weights are drawn
  from the seed, not computed from the query/key as in the paper's dynamic version). Before and after the
  softmax the head maps are mixed across heads: A'_j = A_j + Σ_i A_i · (W1 W2)[i, j], W1 [h × r], W2 [r × h]
  (the [h × h] mixing is I + W1 W2). The pre-softmax mix acts on the scaled scores before the mask; the
  post-softmax mix acts on the probabilities (rows then need not sum to 1). Zero W1 W2 (or rank 0) is MHA.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mha_viz.trace import AttentionWeights, MhaVizError

VARIANTS = ("mha", "gqa", "mqa", "mohsa", "moh", "dcmha")
VARIANT_NAMES = {
    "mha": "MHA (multi-head)",
    "gqa": "GQA (grouped K/V)",
    "mqa": "MQA (one K/V head)",
    "mohsa": "MOHSA (overlapping heads)",
    "moh": "MoH (routed heads)",
    "dcmha": "DCMHA (composed heads, static)",
}
GATES = ("router", "equal")
# the sidebar's defaults: GQA groups, MOHSA overlap width, MoH top-k, DCMHA rank
DEFAULT_GROUPS, DEFAULT_WIDTH, DEFAULT_TOP_K, DEFAULT_RANK = 2, 4, 2, 2


@dataclass(frozen=True)
class VariantSpec:
    """Which layer own weights act as, and its settings (only the chosen variant's fields are used)."""

    variant: str = "mha"
    groups: int = DEFAULT_GROUPS  # gqa: K/V groups (divides h)
    width: int = DEFAULT_WIDTH  # mohsa: overlap w on each side
    top_k: int = DEFAULT_TOP_K  # moh: heads kept per token
    gates: str = "router"  # moh: "router" (softmax score) | "equal" (1)
    rank: int = DEFAULT_RANK  # dcmha: rank r of the cross-head mixing
    seed: int = 0  # moh's router, dcmha's composition

    def check(self, n_heads: int, d_model: int) -> None:
        """Raise MhaVizError with the valid choices unless these settings fit a layer of this size."""
        if self.variant not in VARIANTS:
            raise MhaVizError(f"unknown variant {self.variant!r}; choose one of {', '.join(VARIANTS)}")
        h, dk = n_heads, d_model // n_heads
        if self.variant == "gqa" and (not 1 <= self.groups <= h or h % self.groups):
            valid = [g for g in range(1, h + 1) if h % g == 0]
            raise MhaVizError(f"GQA needs a group count dividing {h} heads; choose one of {', '.join(map(str, valid))}")
        if self.variant == "mohsa" and not 0 <= self.width <= (d_model - dk) // 2:
            raise MhaVizError(f"MOHSA overlap must be between 0 and {(d_model - dk) // 2} (d_k + 2w ≤ d_model)")
        if self.variant == "moh":
            if not 1 <= self.top_k <= h:
                raise MhaVizError(f"MoH top-k must be between 1 and {h} (the head count)")
            if self.gates not in GATES:
                raise MhaVizError(f"unknown MoH gates {self.gates!r}; choose one of {', '.join(GATES)}")
        if self.variant == "dcmha" and not 0 <= self.rank <= h:
            raise MhaVizError(f"DCMHA rank must be between 0 and {h} (the head count)")


@dataclass
class VariantOutput:
    """What a variant computed. Shapes: pattern [h, n, n]; z [h, n, width]; output [n, d_model];
    extras: named tensors of the variant's own steps (see each function), with their titles."""

    pattern: torch.Tensor
    z: torch.Tensor
    output: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # extras' name -> what it is


def _full(w: torch.Tensor, b: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-head [h, d, dk] (+ [h, dk]) -> the full projection [d, h*dk] (+ [h*dk])."""
    h, d, dk = w.shape
    return w.permute(1, 0, 2).reshape(d, h * dk), None if b is None else b.reshape(h * dk)


def _proj(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """X · W_m per head. Shapes: x [n, d]; w [h, d, dk]; b [h, dk]; returns [h, n, dk]."""
    out = torch.einsum("nd,hde->hne", x, w)  # [h, n, dk]
    return out if b is None else out + b.unsqueeze(1)


def _softmax(scores: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """Row softmax with masked entries at 0 (all-masked rows even over every key, as transformers' eager attention).
    Shapes: [h, n, n]; allowed [n, n]."""
    if allowed is None:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(1.0 / scores.shape[-1])


def _causal(n: int, causal: bool) -> torch.Tensor | None:
    return torch.ones(n, n, dtype=torch.bool).tril() if causal else None  # [n, n]


def _out(z: torch.Tensor, w_o: torch.Tensor, b_o: torch.Tensor | None) -> torch.Tensor:
    """Σ_i z_i · W^O_i (+ b_O). Shapes: z [h, n, dv]; w_o [h, dv, d]; returns [n, d]."""
    out = torch.einsum("hne,hed->nd", z, w_o)  # [n, d]
    return out if b_o is None else out + b_o


def mha(w: AttentionWeights, x: torch.Tensor, causal: bool = False, scaled: bool = True) -> VariantOutput:
    """Plain multi-head attention. Shapes: x [n, d]; returns pattern [h, n, n], z [h, n, dk], output [n, d]."""
    q, k, v = _proj(x, w.W_Q, w.b_Q), _proj(x, w.W_K, w.b_K), _proj(x, w.W_V, w.b_V)  # [h, n, dk] x3
    k, v = k.repeat_interleave(w.group, 0), v.repeat_interleave(w.group, 0)  # [h, n, dk]: GQA weights too
    scale = w.scale_factor if scaled else 1.0
    pattern = _softmax(q @ k.transpose(-1, -2) * scale, _causal(x.shape[0], causal))  # [h, n, n]
    z = pattern @ v  # [h, n, dk]
    return VariantOutput(pattern, z, _out(z, w.W_O, w.b_O))


def grouped(w: AttentionWeights, groups: int) -> AttentionWeights:
    """The K/V heads mean-pooled into ``groups`` consecutive groups (weights and biases); Q and W^O unchanged.
    Shapes: W_K, W_V [h, d, dk] -> [g, d, dk]; b_K, b_V [h, dk] -> [g, dk]."""
    h = w.W_K.shape[0]
    size = h // groups

    def pool(t: torch.Tensor | None) -> torch.Tensor | None:  # [h, ...] -> [g, ...]
        return None if t is None else t.reshape(groups, size, *t.shape[1:]).mean(dim=1)

    return AttentionWeights(
        W_Q=w.W_Q, W_K=pool(w.W_K), W_V=pool(w.W_V), W_O=w.W_O,
        b_Q=w.b_Q, b_K=pool(w.b_K), b_V=pool(w.b_V), b_O=w.b_O, scale=w.scale,
    )  # fmt: skip


def gqa(w: AttentionWeights, x: torch.Tensor, groups: int, causal: bool = False, scaled: bool = True) -> VariantOutput:
    """Grouped-query attention with mean-pooled K/V groups. Extras: "K groups", "V groups" [n, g, dk]."""
    gw = grouped(w, groups)
    res = mha(gw, x, causal, scaled)
    k, v = _proj(x, gw.W_K, gw.b_K), _proj(x, gw.W_V, gw.b_V)  # [g, n, dk] x2
    res.extras = {"K groups": k.transpose(0, 1), "V groups": v.transpose(0, 1)}  # [n, g, dk] x2
    res.notes = {
        "K groups": f"each of the {groups} K heads is the mean of {w.n_heads // groups} MHA K heads' weights",
        "V groups": f"query head i reads K/V group i // {w.n_heads // groups}",
    }
    return res


def overlap_columns(h: int, dk: int, width: int, d: int) -> torch.Tensor:
    """Head i's columns [i·dk − w, (i+1)·dk + w) mod d. Shapes: returns [h, dk + 2w] long."""
    start = torch.arange(h).unsqueeze(1) * dk - width  # [h, 1]
    return (start + torch.arange(dk + 2 * width)).remainder(d)  # [h, dk + 2w]


def mohsa(w: AttentionWeights, x: torch.Tensor, width: int, causal: bool = False, scaled: bool = True) -> VariantOutput:
    """Overlapping heads (see the module's text). Extras: "columns" [h, d_k + 2w] (the columns each head reads)."""
    h, d, dk = w.W_Q.shape
    cols = overlap_columns(h, dk, width, d)  # [h, dk + 2w]
    full = []
    for name in ("Q", "K", "V"):
        wf, bf = _full(getattr(w, f"W_{name}"), getattr(w, f"b_{name}"))  # [d, d], [d]
        p = x @ wf if bf is None else x @ wf + bf  # [n, d]
        full.append(p[:, cols].permute(1, 0, 2))  # [h, n, dk + 2w]
    q, k, v = full
    scale = (dk + 2 * width) ** -0.5 if scaled and w.scale is None else (w.scale_factor if scaled else 1.0)
    pattern = _softmax(q @ k.transpose(-1, -2) * scale, _causal(x.shape[0], causal))  # [h, n, n]
    z = pattern @ v  # [h, n, dk + 2w]
    w_o = w.W_O.reshape(h * dk, d)[cols]  # [h, dk + 2w, d]: the same wrapped rows of W^O
    res = VariantOutput(pattern, z, _out(z, w_o, w.b_O))
    res.extras = {"columns": cols}
    res.notes = {"columns": f"head i reads columns [i·{dk} − {width}, (i+1)·{dk} + {width}) mod {d} of Q, K, V, W^O"}
    return res


def router(d: int, h: int, seed: int) -> torch.Tensor:
    """MoH's random router W_r, N(0, 1/d), from the seed. Shapes: returns [d, h]."""
    gen = torch.Generator().manual_seed(int(seed) + 7919)
    return torch.randn(d, h, generator=gen) / d**0.5


def moh(
    w: AttentionWeights, x: torch.Tensor, top_k: int, gates: str = "router", seed: int = 0,
    causal: bool = False, scaled: bool = True, w_r: torch.Tensor | None = None,
) -> VariantOutput:  # fmt: skip
    """Mixture of heads. Extras: "router scores" [n, h] (softmax(x·W_r)), "gates" [n, h] (0 for heads not chosen),
    "W_r" [d, h]. ``w_r``: a router to use instead of the seed's."""
    base = mha(w, x, causal, scaled)
    w_r = router(w.d_model, w.n_heads, seed) if w_r is None else w_r  # [d, h]
    probs = torch.softmax(x @ w_r.to(x.dtype), dim=-1)  # [n, h]
    chosen = probs.topk(top_k, dim=-1).indices  # [n, k]
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, chosen, True)  # [n, h]
    g = (probs if gates == "router" else torch.ones_like(probs)) * keep  # [n, h]
    zg = base.z * g.T.unsqueeze(-1)  # [h, n, dk]: each token's head output times its gate
    res = VariantOutput(base.pattern, base.z, _out(zg, w.W_O, w.b_O))
    res.extras = {"router scores": probs, "gates": g, "W_r": w_r}
    res.notes = {
        "router scores": "softmax(X · W_r) per token (W_r random from the seed)",
        "gates": f"top-{top_k} heads per token; gate = " + ("the router score" if gates == "router" else "1"),
    }
    return res


def composition(h: int, rank: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """DCMHA's static low-rank cross-head weights, from the seed: W1 [h, r], W2 [r, h], each N(0, 1/h)."""
    gen = torch.Generator().manual_seed(int(seed) + 104729)
    return torch.randn(h, rank, generator=gen) / h**0.5, torch.randn(rank, h, generator=gen) / h**0.5


def compose(a: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """A' = A + mix across heads: A'_j = A_j + Σ_i A_i (W1 W2)[i, j]. Shapes: a [h, n, m]; returns [h, n, m]."""
    return a + torch.einsum("iqk,ij->jqk", a, (w1 @ w2).to(a.dtype))


def dcmha(
    w: AttentionWeights, x: torch.Tensor, rank: int, seed: int = 0, causal: bool = False, scaled: bool = True,
    mixes: tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> VariantOutput:  # fmt: skip
    """Composed heads, static. Extras: "pre-softmax mixing", "post-softmax mixing" [h, h] (I + W1 W2), "scores
    composed" [h, n, n]. ``mixes``: ((W1, W2) before, (W1, W2) after) to use instead of the seed's."""
    h = w.n_heads
    pre, post = mixes or (composition(h, rank, seed), composition(h, rank, seed + 1))
    q, k, v = _proj(x, w.W_Q, w.b_Q), _proj(x, w.W_K, w.b_K), _proj(x, w.W_V, w.b_V)  # [h, n, dk] x3
    scale = w.scale_factor if scaled else 1.0
    scores = compose(q @ k.transpose(-1, -2) * scale, *pre)  # [h, n, n]
    pattern = compose(_softmax(scores, _causal(x.shape[0], causal)), *post)  # [h, n, n]
    z = pattern @ v  # [h, n, dk]
    eye = torch.eye(h)
    res = VariantOutput(pattern, z, _out(z, w.W_O, w.b_O))
    res.extras = {
        "pre-softmax mixing": eye + pre[0] @ pre[1], "post-softmax mixing": eye + post[0] @ post[1],
        "scores composed": scores,
    }  # fmt: skip
    res.notes = {
        "pre-softmax mixing": f"I + W1·W2 (rank {rank}), static from the seed: not computed from Q/K as in the paper",
        "post-softmax mixing": "applied to the probabilities: rows need not sum to 1",
    }
    return res


def run_variant(
    w: AttentionWeights, x: torch.Tensor, spec: VariantSpec, causal: bool = False, scaled: bool = True
) -> VariantOutput:
    """The layer ``spec`` names on own weights ``w`` (plain MHA weights). Shapes: x [n, d_model]."""
    spec.check(w.n_heads, w.d_model)
    if w.n_kv_heads != w.n_heads and spec.variant != "mha":
        raise MhaVizError("the variants start from multi-head weights (as many K/V heads as query heads)")
    with torch.no_grad():
        if spec.variant == "gqa":
            return gqa(w, x, spec.groups, causal, scaled)
        if spec.variant == "mqa":
            return gqa(w, x, 1, causal, scaled)
        if spec.variant == "mohsa":
            return mohsa(w, x, spec.width, causal, scaled)
        if spec.variant == "moh":
            return moh(w, x, spec.top_k, spec.gates, spec.seed, causal, scaled)
        if spec.variant == "dcmha":
            return dcmha(w, x, spec.rank, spec.seed, causal, scaled)
        return mha(w, x, causal, scaled)

"""The two objects that flow through mha-viz: attention weights and one traced forward pass.

Shape glossary (head axis first, no batch axis: one sentence at a time)::

    tokens      tuple[str, ...]                query-side labels, distinct even for repeated words
    key_tokens  tuple[str, ...]                key-side labels (the source text's for cross-attention)
    x           [q_pos, d_model]               the attention module's input (query side)
    q           [n_heads, q_pos, d_head]       as the model uses it (after rotary embeddings / QK-norm)
    k, v        [n_kv_heads, k_pos, d_head]    n_kv_heads = n_heads unless grouped-query attention:
                                               query head i uses K/V head i // (n_heads // n_kv_heads)
    bias        [n_heads | 1, q_pos, k_pos]    additive position bias (T5), or None
    scores      [n_heads, q_pos, k_pos]        scaled, soft-capped, biased, masked (-inf), before softmax
    pattern     [n_heads, q_pos, k_pos]        softmax(scores) row by row; rows sum to 1
    z           [n_heads, q_pos, d_head]       pattern @ v[group]
    concat      [q_pos, n_heads * d_head]      heads side by side
    head_out    [n_heads, q_pos, d_model]      z[h] @ W_O[h]: each head's contribution after W^O
    output      [q_pos, d_model]               concat @ W_O + b_O == head_out.sum(0) + b_O

    W_Q, W_K, W_V  [n_heads, d_model, d_head]     b_Q, b_K, b_V  [n_heads, d_head]
    W_O            [n_heads, d_head, d_model]     b_O            [d_model]

Both dataclasses are frozen: edits (re-split heads, W^O variants, ablation) build new objects
with ``dataclasses.replace``; a model shared by every user of the app is never mutated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import torch

from mha_viz.errors import MhaVizError as MhaVizError  # re-exported: `from mha_viz.trace import MhaVizError`


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise MhaVizError(message)


@dataclass(frozen=True, eq=False)
class AttentionWeights:
    """Per-head projections of one multi-head attention layer (TransformerLens layout).

    Shapes: W_Q [n_heads, d_model, d_head]; W_K, W_V [n_kv_heads, d_model, d_head];
    W_O [n_heads, d_head, d_model]; b_Q [n_heads, d_head], b_K, b_V [n_kv_heads, d_head] or None;
    b_O [d_model] or None. n_kv_heads divides n_heads: with fewer K/V heads than query heads
    (grouped-query attention), query head i uses K/V head i // (n_heads // n_kv_heads).
    ``scale`` is the factor applied to Q K^T (None means 1/sqrt(d_head)). These are plain linear maps of X:
    layers with rotary embeddings or QK-norm are traced from what the model computed instead.
    """

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    b_Q: torch.Tensor | None = None
    b_K: torch.Tensor | None = None
    b_V: torch.Tensor | None = None
    b_O: torch.Tensor | None = None
    scale: float | None = None

    def __post_init__(self) -> None:
        h, d, dh = self.W_Q.shape if self.W_Q.ndim == 3 else (0, 0, 0)
        _check(self.W_Q.ndim == 3, f"W_Q must be [n_heads, d_model, d_head], got {tuple(self.W_Q.shape)}")
        kv = int(self.W_K.shape[0]) if self.W_K.ndim == 3 else 0
        for name in ("W_K", "W_V"):
            shape = tuple(getattr(self, name).shape)
            _check(shape == (kv, d, dh), f"{name} has shape {shape}, expected {(kv, d, dh)} like W_Q")
        _check(kv >= 1 and h % kv == 0, f"{kv} key/value heads must divide {h} query heads")
        _check(
            tuple(self.W_O.shape) == (h, dh, d),
            f"W_O has shape {tuple(self.W_O.shape)}, expected {(h, dh, d)} (n_heads, d_head, d_model)",
        )
        for name, rows in (("b_Q", h), ("b_K", kv), ("b_V", kv)):
            b = getattr(self, name)
            _check(
                b is None or tuple(b.shape) == (rows, dh),
                f"{name} has shape {tuple(b.shape) if b is not None else None}, expected {(rows, dh)}",
            )
        _check(
            self.b_O is None or tuple(self.b_O.shape) == (d,),
            f"b_O has shape {tuple(self.b_O.shape) if self.b_O is not None else None}, expected {(d,)}",
        )
        _check(h >= 1 and d >= 1 and dh >= 1, "attention weights need at least one head and dimension")
        for name, t in self.tensors().items():  # one memory layout everywhere (views made contiguous)
            if not t.is_contiguous():
                object.__setattr__(self, name, t.contiguous())

    # --- sizes -------------------------------------------------------------------------
    @property
    def n_heads(self) -> int:
        return int(self.W_Q.shape[0])

    @property
    def n_kv_heads(self) -> int:
        return int(self.W_K.shape[0])

    @property
    def group(self) -> int:
        """How many query heads share one key/value head (1 without grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def d_model(self) -> int:
        return int(self.W_Q.shape[1])

    @property
    def d_head(self) -> int:
        return int(self.W_Q.shape[2])

    @property
    def has_bias(self) -> bool:
        return any(b is not None for b in (self.b_Q, self.b_K, self.b_V, self.b_O))

    @property
    def scale_factor(self) -> float:
        """The factor that multiplies Q K^T (1/sqrt(d_head) unless the model says otherwise)."""
        return self.d_head**-0.5 if self.scale is None else float(self.scale)

    @property
    def device(self) -> torch.device:
        return self.W_Q.device

    @property
    def dtype(self) -> torch.dtype:
        return self.W_Q.dtype

    def tensors(self) -> dict[str, torch.Tensor]:
        """The weights that are present, by their glossary names (W_Q ... b_O)."""
        names = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def to(self, device: torch.device | str, dtype: torch.dtype) -> AttentionWeights:
        """A copy on ``device`` in ``dtype`` (``self`` when nothing changes)."""
        device = torch.device(device)
        if self.device.type == device.type and self.dtype == dtype:
            return self
        moved = {n: t.to(device=device, dtype=dtype) for n, t in self.tensors().items()}
        return dataclasses.replace(self, **moved)

    # --- packed form for the fast path ----------------------------------------------------
    @cached_property
    def packed_qkv(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Q|K|V projections as one matrix, so the trace needs a single matmul.

        Shapes: weight [d_model, (n_heads + 2 * n_kv_heads) * d_head]; bias [same columns] or None.
        """
        d = self.d_model
        mats = (self.W_Q, self.W_K, self.W_V)
        weight = torch.cat([w.permute(1, 0, 2).reshape(d, -1) for w in mats], dim=1).contiguous()  # [d, cols]
        if self.b_Q is None and self.b_K is None and self.b_V is None:
            return weight, None
        biases = [
            torch.zeros(w.shape[0] * w.shape[2], dtype=self.dtype, device=self.device) if b is None else b.reshape(-1)
            for w, b in zip(mats, (self.b_Q, self.b_K, self.b_V), strict=True)
        ]
        return weight, torch.cat(biases)  # [cols]


@dataclass(frozen=True, eq=False)
class Latent:
    """What a latent-attention layer (MLA: DeepSeek-V2/V3, MiniCPM3) caches per token, and how the heads read it.

    Shapes: c_kv [k_pos, d_c] (the compressed key/value latent, after its norm); k_rope [k_pos, d_rope] (the
    rotary key part, after rotation, shared by every head); k_rope_pre [k_pos, d_rope] the same before rotation,
    or None; W_UK [n_kv_heads, d_c, d_nope] and W_UV [n_kv_heads, d_c, d_v]: head g's keys without rotary part
    are c_kv @ W_UK[g] (k[g, :, :d_nope]) and its values c_kv @ W_UV[g] (v[g]).
    """

    c_kv: torch.Tensor
    k_rope: torch.Tensor
    W_UK: torch.Tensor
    W_UV: torch.Tensor
    k_rope_pre: torch.Tensor | None = None

    @property
    def d_c(self) -> int:
        return int(self.c_kv.shape[-1])

    @property
    def d_rope(self) -> int:
        return int(self.k_rope.shape[-1])

    @property
    def d_nope(self) -> int:
        return int(self.W_UK.shape[-1])

    @property
    def cached(self) -> int:
        """Numbers one token costs in this layer's cache: d_c + d_rope."""
        return self.d_c + self.d_rope

    @property
    def cached_mha(self) -> int:
        """What the same heads would cost as plain multi-head attention: every head's K and V, h · (d_k + d_v)."""
        return int(self.W_UK.shape[0]) * (self.d_nope + self.d_rope + int(self.W_UV.shape[-1]))


@dataclass(frozen=True, eq=False)
class Differential:
    """Differential attention (DiffLlama): the model calls its attention twice with the same q and k, on each half
    of V, and W^O reads, for each pair j of heads (j, j + h/2), (1 − λ_init) · RMSNorm(A_j · [V1|V2] − λ · A_{j+h/2}
    · [V1|V2]): the difference of two softmax maps, weighted by λ. Shapes: v2 [n_kv_heads, k_pos, d_head] (the
    second call's values; the trace's v is the first's)."""

    lam: float  # λ = exp(λ_q1 · λ_k1) − exp(λ_q2 · λ_k2) + λ_init
    lam_init: float
    eps: float  # the RMSNorm's epsilon
    v2: torch.Tensor


@dataclass(frozen=True, eq=False)
class Routing:
    """A mixture of attention heads (JetMoE's MoA): a router picks k of n_experts experts per token; each expert has its
    own query projection and W^O over the n_kv_heads shared K/V heads. The attention call's head j·n_kv + g is token
    m's j-th chosen expert's head g; W^O is chosen per token: head_out[j·n_kv + g, m] = gates[m, j] · z[j·n_kv + g, m]
    · W_E[experts[m, j], g]. Shapes: experts [q_pos, k] long (best first); gates [q_pos, k] (softmax over the chosen
    experts' router logits); W_E [n_experts, n_kv_heads, d_head, d_model] (every expert's W^O, per head)."""

    experts: torch.Tensor
    gates: torch.Tensor
    W_E: torch.Tensor

    def usage(self) -> torch.Tensor:
        """Each token's gate per expert (0: not chosen; each row has k chosen). Shapes: [q_pos, n_experts]."""
        n, e = int(self.experts.shape[0]), int(self.W_E.shape[0])
        return torch.zeros(n, e, dtype=self.gates.dtype).scatter(1, self.experts, self.gates)

    def head_out(self, z: torch.Tensor) -> torch.Tensor:
        """Each head's contribution after its token's W^O, gate included, an expert at a time (as the model groups
        tokens). Shapes: z [k·n_kv, q_pos, d_head] -> [k·n_kv, q_pos, d_model]."""
        kv = int(self.W_E.shape[1])
        out = z.new_zeros(z.shape[0], z.shape[1], self.W_E.shape[-1])  # [h, q_pos, d_model]
        for j in range(self.experts.shape[1]):
            for e in self.experts[:, j].unique().tolist():
                m = self.experts[:, j] == e  # [q_pos]: the tokens whose j-th choice is expert e
                gate = self.gates[m, j].to(z)[None, :, None]  # [1, m, 1]
                m = m.to(z.device)
                w = self.W_E[e].to(z)  # [kv, d_head, d_model]
                out[j * kv : (j + 1) * kv, m] = torch.bmm(z[j * kv : (j + 1) * kv][:, m], w) * gate
        return out


@dataclass(frozen=True, eq=False)
class AttentionTrace:
    """Every intermediate of one multi-head attention forward pass, detached, on the CPU.

    See the module docstring for the shapes. ``dead_rows`` [query_pos] marks query rows whose
    keys were all masked: their pattern row spreads evenly over every key (transformers' eager attention), never
    NaN. ``W_O`` [n_heads, d_head,
    d_model] is the output projection that was used; ``head_out`` is computed from it on first
    access (it costs as much as the output projection itself, and most views never need it).
    """

    tokens: tuple[str, ...]
    x: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scores: torch.Tensor
    pattern: torch.Tensor
    z: torch.Tensor
    concat: torch.Tensor
    output: torch.Tensor
    W_O: torch.Tensor
    dead_rows: torch.Tensor
    scale: float
    causal: bool
    b_O: torch.Tensor | None = None
    key_tokens: tuple[str, ...] = ()  # empty: the same as tokens (self-attention)
    part: str = "encoder"  # "encoder" | "decoder" | "cross" (own weights: "encoder")
    softcap: float | None = None
    bias: torch.Tensor | None = None
    model_delta: float | None = None  # max |pattern - the model's own weights| (None: not from a model)
    q_pre: torch.Tensor | None = None  # [n_heads, q_pos, d_head]: X · W_Q before rotary embeddings (when recorded)
    k_pre: torch.Tensor | None = None  # [n_kv_heads, k_pos, d_head]: X · W_K before rotary embeddings
    sink: torch.Tensor | None = None  # [n_heads]: learned sink logits (gpt-oss); a row's weights then sum to
    # 1 − its sink share (sink_share)
    wo_input: torch.Tensor | None = None  # [q_pos, n_heads * d_head]: what W^O reads where the model changes the
    # concatenated heads first (Qwen3-Next's output gate, BitNet's norm); None: concat itself
    latent: Latent | None = None  # latent attention (MLA): the cached latent the keys and values come from
    differential: Differential | None = None  # differential attention (DiffLlama): λ and the second half of V
    routing: Routing | None = None  # a mixture of attention heads (JetMoE): W^O chosen per token; W_O then holds
    # every expert's W^O as [n_experts · n_kv_heads, d_head, d_model], and head_out follows the routing

    @property
    def sink_share(self) -> torch.Tensor | None:
        """The share of each query's attention the learned sink takes (goes to no token). Shapes: [h, q_pos]."""
        return None if self.sink is None else (1.0 - self.pattern.sum(-1)).clamp_min(0.0)

    def __post_init__(self) -> None:
        if not self.key_tokens:
            object.__setattr__(self, "key_tokens", self.tokens)

    def __repr__(self) -> str:
        """One line (a notebook cell ending in a trace shows this, not every tensor's numbers)."""
        shapes = ", ".join(f"{n} {list(getattr(self, n).shape)}" for n in ("q", "k", "pattern", "output"))
        return (
            f"AttentionTrace({self.part}, {self.n_heads} heads, {self.n_tokens} queries × {len(self.key_tokens)} keys; "
            f"{shapes}; .tensors() for every intermediate)"
        )

    TENSOR_NAMES = ("x", "q", "k", "v", "scores", "pattern", "z", "concat", "head_out", "output")

    @property
    def group(self) -> int:
        """Query heads per key/value head (k and v are [n_kv_heads, pos, d_head])."""
        return self.n_heads // int(self.k.shape[0])

    @cached_property
    def head_out(self) -> torch.Tensor:
        """Each head's contribution after W^O: z[h] @ W_O[h] (or its slice of W^O's input, where the model gates or
        normalises the heads first). Shapes: [n_heads, pos, d_model]."""
        with torch.no_grad():
            if self.routing is not None:
                return self.routing.head_out(self.z)
            z = self.z if self.wo_input is None else self.wo_input.view(self.n_tokens, self.n_heads, -1).transpose(0, 1)
            return torch.bmm(z, self.W_O.to(z.dtype))  # [h, pos, d_model]

    @property
    def n_heads(self) -> int:
        return int(self.pattern.shape[0])

    @property
    def n_tokens(self) -> int:
        return int(self.pattern.shape[1])

    @property
    def any_dead_rows(self) -> bool:
        return bool(self.dead_rows.any())

    def tensors(self) -> dict[str, torch.Tensor]:
        """The trace tensors by their glossary names."""
        return {n: getattr(self, n) for n in self.TENSOR_NAMES}

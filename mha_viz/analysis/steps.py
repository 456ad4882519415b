"""The seven steps of one head's computation, matrix by matrix, from a trace (pure numpy; no Streamlit).

1 X, 2 Q, K, V (latent attention: X → c_KV → K, V and the shared rotary key part), 3 QKᵀ, 4 scaling, 5 mask,
6 softmax, 7 weights · V, concat, · W^O. Every matrix is read from the trace or computed from its own tensors
(3 and 4: Q_i K_gᵀ and its scaled copy), so it is what the model computed. Used by mha_viz.show (the dashboard's
Step by step tab builds the same list).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.differential import difference, pair_of, pair_outputs
from mha_viz.trace import AttentionTrace, MhaVizError


@dataclass(frozen=True)
class Step:
    """One matrix of the computation: its step of the seven (1 X … 7 output), what it is and its values."""

    number: int
    title: str
    z: np.ndarray
    keys: bool  # columns are key tokens (else plain dimensions)
    name: str  # the colour bar's and hover's name
    signed: bool
    shape: str
    key_rows: bool = False  # rows are key tokens (K, V)
    row_labels: tuple[str, ...] | None = None  # rows that are not tokens (heads): their labels
    col_labels: tuple[str, ...] | None = None  # columns that are heads: their labels


def numbered(steps: Sequence[Step]) -> list[str]:
    """Titles numbered by the seven steps: "3. …", or "2a. …", "2b. …" where one step has several matrices."""
    counts = {s.number: sum(t.number == s.number for t in steps) for s in steps}
    seen: dict[int, int] = {}
    out = []
    for s in steps:
        seen[s.number] = seen.get(s.number, 0) + 1
        letter = "abcdefghij"[seen[s.number] - 1] if counts[s.number] > 1 else ""
        out.append(f"{s.number}{letter}. {s.title}")
    return out


def scale_title(scale: float, dk: int, scaled: bool) -> str:
    """Step 4's title: "÷ √d_k (× 0.1768)", the model's own factor where it is not 1/√d_k, or "scaling off"."""
    if not scaled:
        return f"scaling off (× {scale:.4g})"
    if abs(scale - dk**-0.5) <= 1e-6 * dk**-0.5:
        return f"÷ √d_k = ÷ √{dk} (× {scale:.4g})"
    return f"× {scale:.4g} (the model's scale, not 1/√d_k)"


def head_steps(
    t: AttentionTrace, i: int, scaled: bool = True, plain: bool = False, biases: Sequence[str] = ()
) -> list[Step]:
    """Head ``i``'s matrices in the order of the seven steps. ``plain``: Q, K, V are X · W (+ b) and the titles
    say so, naming the biases in ``biases`` ("b_Q", "b_K", "b_V"). Shapes: each Step.z is 2-D ([rows, cols])."""
    h, n, dk = t.q.shape
    if not 0 <= i < h:
        raise MhaVizError(f"head {i} does not exist: this layer has heads 0 to {h - 1}")
    nk, d = t.k.shape[1], t.output.shape[1]
    g = i // t.group  # the key/value head this query head uses (differs only with grouped-query attention)
    shared = "" if t.group == 1 else f" (heads {g * t.group}–{(g + 1) * t.group - 1})"
    raw = (t.q[i] @ t.k[g].T).numpy()  # [n, nk] before scaling
    qs, ks, sq = f"[{n} × {dk}]", f"[{nk} × {dk}]", f"[{n} × {nk}]"

    def proj(m: str, j: int) -> str:  # "Q_0 = X · W_Q[0] + b_Q[0]"
        return f"{m}_{j} = X · W_{m}[{j}]" + (f" + b_{m}[{j}]" if f"b_{m}" in biases else "")

    steps = []
    if t.x.shape[1]:
        steps.append(Step(1, "X (one row per token)", t.x.numpy(), False, "X", True, f"[{n} × {t.x.shape[1]}]"))
    if t.q_pre is not None and t.k_pre is not None:  # rotary embeddings: Q and K before and after rotation
        steps += [
            Step(2, f"{proj('Q', i)}, before rotation", t.q_pre[i].numpy(), False, "Q", True, qs),
            Step(2, f"{proj('K', g)}, before rotation{shared}", t.k_pre[g].numpy(), False, "K", True, ks, True),
        ]
    used = " rotated (rotary positions)" if t.q_pre is not None else " as used"
    if t.routing is not None:  # a mixture of attention heads: each token's query from its own chosen expert
        j, kv = divmod(i, int(t.routing.W_E.shape[1]))
        used = f" as used (each token's choice {j + 1}'s expert, its query head {kv})"
    k_title, v_title = (proj("K", g) if plain else f"K_{g}{used}"), (proj("V", g) if plain else f"V_{g} as used")
    if t.latent is not None:  # latent attention: K (no-rope part) and V come from the cached latent c_KV
        steps += latent_steps(t, g)
        k_title, v_title = f"K_{g} = [c_KV · W_UK[{g}] | k_rope]", f"V_{g} = c_KV · W_UV[{g}]"
    vs = f"[{nk} × {t.v.shape[-1]}]"  # d_v (latent attention: d_v ≠ d_k)
    steps += [
        Step(2, proj("Q", i) if plain else f"Q_{i}{used}", t.q[i].numpy(), False, "Q", True, qs),
        Step(2, k_title + shared, t.k[g].numpy(), False, "K", True, ks, True),
        Step(2, v_title + shared, t.v[g].numpy(), False, "V", True, vs, True),
        Step(3, f"Q_{i} K_{g}ᵀ", raw, True, "QKᵀ", True, sq),
        Step(4, scale_title(t.scale, dk, scaled), raw * t.scale, True, "scaled", True, sq),
    ]
    if t.softcap is not None:
        capped = np.tanh(raw * t.scale / t.softcap) * t.softcap
        steps.append(Step(4, f"soft-cap: {t.softcap:g} · tanh(· / {t.softcap:g})", capped, True, "capped", True, sq))
    if t.bias is not None:
        bias = t.bias[min(i, t.bias.shape[0] - 1)].numpy()
        steps.append(Step(4, "+ position bias (added by the model)", bias, True, "bias", True, sq))
    masked = "causal: future keys → −∞, shown grey" if t.causal else "masked keys → −∞, shown grey"
    read = "concat" if t.wo_input is None else "W^O's input"
    cat = f"[{n} × {t.concat.shape[-1]}]"  # h · d_v (latent attention: d_v ≠ d_k)
    if t.routing is not None:  # each token's heads through its chosen experts' W^O, weighted by the gates
        read = "Σ over each token's chosen experts: gate · (its heads · that expert's W^O)"
    out = f"output = {read}" + (" · W^O" if t.routing is None else "") + (" + b_O" if t.b_O is not None else "")
    steps += [
        Step(5, f"mask ({masked})", t.scores[i].numpy(), True, "scores", True, sq),
        Step(6, "softmax, row by row (each row sums to 1)", t.pattern[i].numpy(), True, "weight", False, sq),
        Step(7, f"head_{i} = weights · V_{g}", t.z[i].numpy(), False, "z", True, f"[{n} × {t.z.shape[-1]}]"),
        Step(7, f"concat(head_0 … head_{h - 1})", t.concat.numpy(), False, "concat", True, cat),
        Step(7, out, t.output.numpy(), False, "output", True, f"[{n} × {d}]"),
    ]
    if t.differential is not None:  # differential attention: the pair's second map and their difference
        steps[-1:-1] = differential_steps(t, i)
    if t.routing is not None:  # W^O chosen per token: the router's choice and this head through it
        steps[-1:-1] = routing_steps(t, i)
    if t.wo_input is not None:  # the model gates or normalises the heads first: what W^O actually reads
        gate = Step(7, "the model's gate / norm on the heads (what W^O reads)", t.wo_input.numpy(), False,
                    "W^O input", True, f"[{n} × {t.wo_input.shape[-1]}]")  # fmt: skip
        steps.insert(len(steps) - 1, gate)
    return steps


def latent_steps(t: AttentionTrace, g: int) -> list[Step]:
    """Latent attention's (MLA) extra step-2 matrices for K/V head ``g``: X → c_KV → K (no-rope part), and the rotary
    key part every head shares. Each is what the model computed (recorded: c_KV at W_UKV's input, k_rope in k)."""
    lat = t.latent
    if lat is None:
        return []
    nk, dn = lat.c_kv.shape[0], lat.d_nope
    rope = f"[{nk} × {lat.d_rope}]"
    steps = [Step(2, "c_KV = norm(X · W_DKV): the latent every head's K and V come from (cached)", lat.c_kv.numpy(),
                  False, "c_KV", True, f"[{nk} × {lat.d_c}]", True)]  # fmt: skip
    if lat.k_rope_pre is not None:
        steps.append(Step(2, "k_rope = X · W_KR, before rotation (one for all heads)", lat.k_rope_pre.numpy(), False,
                          "k_rope", True, rope, True))  # fmt: skip
    steps += [
        Step(2, "k_rope rotated (rotary positions; one for all heads, cached)", lat.k_rope.numpy(), False, "k_rope",
             True, rope, True),
        Step(2, f"K_{g}'s no-rope part = c_KV · W_UK[{g}]", t.k[g][:, :dn].numpy(), False, "K", True,
             f"[{nk} × {dn}]", True),
    ]  # fmt: skip
    return steps


def differential_steps(t: AttentionTrace, i: int) -> list[Step]:
    """Differential attention's (DiffLlama) matrices for head ``i``'s pair (j, j + h/2): both softmax maps, their
    difference A_j − λ · A_{j+h/2}, and the pair's output, normed, as W^O reads it. Shapes: each Step.z is 2-D."""
    d = t.differential
    if d is None:
        return []
    j, k = pair_of(t, i)
    n, nk = t.pattern.shape[1:]
    sq = f"[{n} × {nk}]"
    out = pair_outputs(t)[j].numpy()  # [n, 2·d_head]
    return [
        Step(7, f"softmax map 1 of pair {j}: head {j}", t.pattern[j].numpy(), True, "weight", False, sq),
        Step(7, f"softmax map 2 of pair {j}: head {k}", t.pattern[k].numpy(), True, "weight", False, sq),
        Step(7, f"differential map A_{j} − λ · A_{k} (λ = {d.lam:.4g}; rows sum to 1 − λ)", difference(t, j).numpy(),
             True, "weight", True, sq),
        Step(7, f"pair {j} = (1 − λ_init) · RMSNorm(differential map · [V1|V2]) (λ_init = {d.lam_init:.4g})", out,
             False, "pair", True, f"[{n} × {out.shape[-1]}]"),
    ]  # fmt: skip


def routing_steps(t: AttentionTrace, i: int) -> list[Step]:
    """A mixture of attention heads' (JetMoE) step-7 matrices for head ``i``: which experts each token's heads went
    through, with their gates (the router's own choice), and head i through its token's expert's W^O, gated (each
    token's heads go through the output projections of the experts it was routed to, weighted by the gates)."""
    r = t.routing
    if r is None:
        return []
    (n, k), (e, kv) = r.experts.shape, r.W_E.shape[:2]
    j, g = divmod(i, kv)
    names = tuple(f"expert {x}" for x in range(e))
    d = int(t.output.shape[1])
    return [
        Step(7, f"the router's choice: each token's gate per expert ({k} of {e} used; 0 = not used; an expert is "
             f"{kv} heads)", r.usage().numpy(), False, "gate", False, f"[{n} × {e}]", col_labels=names),
        Step(7, f"head_{i} · W^O of each token's choice {j + 1} (that expert's head {g}), × its gate",
             t.head_out[i].numpy(), False, "head out", True, f"[{n} × {d}]"),
    ]  # fmt: skip


def latent_cache(t: AttentionTrace) -> str:
    """What one token costs in a latent-attention layer's cache, against the same heads' K and V ("" elsewhere)."""
    lat = t.latent
    if lat is None:
        return ""
    h, dk, dv = int(lat.W_UK.shape[0]), lat.d_nope + lat.d_rope, int(lat.W_UV.shape[-1])
    return (
        f"Latent attention: each token costs this layer's cache d_c + d_rope = {lat.d_c} + {lat.d_rope} = "
        f"{lat.cached} numbers (c_KV and k_rope), instead of h · (d_k + d_v) = {h} · ({dk} + {dv}) = "
        f"{lat.cached_mha} for the same heads' K and V: {lat.cached_mha / lat.cached:.3g}× fewer."
    )


def variant_steps(res: object, name: str, i: int, mha_output: np.ndarray) -> list[Step]:
    """The extra matrices of own weights computed as another layer (mha_viz.own_variants.VariantOutput ``res``),
    for head ``i``: the variant's own steps (K/V groups, overlapping columns, router and gates, cross-head
    mixing), head i's weights and output, the layer's output and its difference from MHA's (``mha_output``
    [n × d]). Numbered 8 onwards (after the seven steps of plain MHA). Shapes: each Step.z is 2-D."""
    pattern, z, out = res.pattern.numpy(), res.z.numpy(), res.output.numpy()  # [h, n, n], [h, n, e], [n, d]
    h, n, _ = pattern.shape
    d = out.shape[1]
    ex = {k: v.numpy() for k, v in res.extras.items()}
    heads_ = tuple(f"head {j}" for j in range(h))
    steps: list[Step] = []
    mixed = "mixed weights (rows need not sum to 1)" if name == "dcmha" else "attention weights in this layer"
    if "K groups" in ex:  # [n, g, dk]
        g_count, size = ex["K groups"].shape[1], h // ex["K groups"].shape[1]
        g, dk = i // size, ex["K groups"].shape[2]
        heads = f"heads {g * size}–{(g + 1) * size - 1}"
        steps += [
            Step(8, f"K group {g} of {g_count} (mean W_K of {heads})",
                 ex["K groups"][:, g], False, "K", True, f"[{n} × {dk}]", True),
            Step(8, f"V group {g} of {g_count} (mean W_V of {heads})", ex["V groups"][:, g], False, "V", True,
                 f"[{n} × {dk}]", True),
        ]  # fmt: skip
    if "columns" in ex:  # [h, dk + 2w]
        cols = ex["columns"]
        onehot = np.zeros((h, int(cols.max()) + 1))
        for j in range(h):
            onehot[j, cols[j]] = 1.0
        steps.append(Step(8, "the columns each head reads (1 = read)", onehot, False, "read", False,
                          f"[{h} × {onehot.shape[1]}]", row_labels=heads_))  # fmt: skip
    if "router scores" in ex:  # [n, h]
        steps += [
            Step(8, "router scores softmax(X · W_r), per token", ex["router scores"], False, "score", False,
                 f"[{n} × {h}]", col_labels=heads_),
            Step(8, "gates: the chosen heads' weights (0 = head not used)", ex["gates"], False, "gate", False,
                 f"[{n} × {h}]", col_labels=heads_),
        ]  # fmt: skip
    if "pre-softmax mixing" in ex:  # [h, h]
        steps += [
            Step(8, "pre-softmax mixing I + W1·W2 (row head → column head)", ex["pre-softmax mixing"], False,
                 "mix", True, f"[{h} × {h}]", row_labels=heads_, col_labels=heads_),
            Step(8, "post-softmax mixing I + W1·W2", ex["post-softmax mixing"], False, "mix", True, f"[{h} × {h}]",
                 row_labels=heads_, col_labels=heads_),
            Step(8, f"head {i}'s composed scores (before the mask)", ex["scores composed"][i], True, "scores", True,
                 f"[{n} × {n}]"),
        ]  # fmt: skip
    steps += [
        Step(9, f"head {i}'s {mixed}", pattern[i], True, "weight", False, f"[{n} × {n}]"),
        Step(9, f"head_{i} = weights · V", z[i], False, "z", True, f"[{n} × {z.shape[2]}]"),
        Step(10, "the layer's output", out, False, "output", True, f"[{n} × {d}]"),
        Step(10, "output − MHA's output", out - mha_output, False, "difference", True, f"[{n} × {d}]"),
    ]
    return steps

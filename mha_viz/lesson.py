"""The Lesson tab's content as data: the seven steps of multi-head attention on one traced layer, and the
two claims of the source articles computed live (no Streamlit, no Plotly).

    build_steps(trace, head, ...) -> [Step 1 … Step 7]   each with its real matrices (the trace's)
    loop_vs_batched(trace, weights, x) -> Equivalence     a Python loop over heads == one big matrix
    identity_equivalence(weights, x, ...) -> Equivalence  h = 1 with W^O = I == plain self-attention
    default_head(pattern, queries, keys) -> int           the head shown first ("it" → "animal")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mha_viz.studies import single_head_identity
from mha_viz.trace import AttentionTrace, AttentionWeights


@dataclass(frozen=True)
class Panel:
    """One matrix of a step. Shapes: matrix [rows, cols]; row_labels [rows]; col_labels [cols] or None
    (feature dimensions). ``kind``: "signed" (diverging colours), "weights" (attention) or "scores" (−∞ =
    masked)."""

    title: str
    matrix: np.ndarray
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...] | None
    value_name: str
    kind: str = "signed"

    @property
    def shape(self) -> str:
        rows, cols = self.matrix.shape
        return f"[{rows} × {cols}]"


@dataclass(frozen=True)
class Step:
    number: int
    title: str
    text: str
    panels: tuple[Panel, ...]
    deeper: str  # the tab that goes further (a name in ui.sidebar.VIEWS)
    deeper_why: str


@dataclass(frozen=True)
class Equivalence:
    """Two computations that should agree. Shapes: left, right [rows, cols] float64."""

    left_name: str
    right_name: str
    left: np.ndarray
    right: np.ndarray
    note: str

    @property
    def diff(self) -> np.ndarray:
        return np.abs(self.left - self.right)

    @property
    def max_diff(self) -> float:
        return float(self.diff.max()) if self.diff.size else 0.0


# --- the default head ----------------------------------------------------------------------------------
def _find(pieces: Sequence[str], word: str) -> int | None:
    low = [p.strip().lower() for p in pieces]
    return low.index(word) if word in low else None


def default_head(pattern: np.ndarray, queries: Sequence[str], keys: Sequence[str]) -> tuple[int, str]:
    """The head to show first, and why: the head whose weight from "it" (else token 1) to "animal" is largest;
    head 0 when the keys have no "animal". ``queries``/``keys`` are the readable pieces (case ignored).
    Shapes: pattern [h, n_q, n_k]."""
    k = _find(keys, "animal")
    if k is None or pattern.shape[0] == 0:
        return 0, "head 0 (this text has no “animal” to look for)"
    q = _find(queries, "it")
    q = q if q is not None else min(1, pattern.shape[1] - 1)
    head = int(np.argmax(pattern[:, q, k]))
    return head, (
        f"head {head}: of all heads of this layer it gives the most weight from “{queries[q].strip()}” to "
        f"“{keys[k].strip()}” ({float(pattern[head, q, k]):.3f})"
    )


# --- masks -------------------------------------------------------------------------------------------
def mask_kind(allowed: np.ndarray) -> tuple[str, str]:
    """Which mask a [n_q, n_k] bool matrix (True = may attend) is: ("none" | "causal" | "sliding" | "padding" |
    "causal + padding" | "other", a sentence saying so)."""
    allowed = np.asarray(allowed, dtype=bool)
    nq, nk = allowed.shape
    if allowed.all():
        return "none", "No mask: every token may look at every token (an encoder reading one sentence)."
    tril = np.tril(np.ones((nq, nk), dtype=bool), nk - nq)  # key position <= query position
    if np.array_equal(allowed, tril):
        return "causal", "Causal mask: each token sees only itself and the tokens before it (a decoder)."
    cols = allowed.any(axis=0)  # keys someone may see
    if np.array_equal(allowed, np.broadcast_to(cols, allowed.shape)):
        return "padding", f"Padding mask: {int((~cols).sum())} key position(s) are hidden from every query."
    if np.array_equal(allowed, tril & cols):
        return "causal + padding", "Causal mask plus padding: earlier tokens only, and some keys hidden from all."
    if not (allowed & ~tril).any():
        w = int(allowed.sum(axis=1).max())
        band = tril & ~np.tril(np.ones((nq, nk), dtype=bool), nk - nq - w)
        if np.array_equal(allowed, band):
            return "sliding", f"Sliding-window causal mask: each token sees itself and at most {w - 1} tokens before."
    return "other", "The model's own mask (neither plain causal, padding nor a sliding window)."


# --- the seven steps ------------------------------------------------------------------------------------
def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy() if t.dtype == torch.float64 else t.detach().numpy()


def _qkv_words(plain: bool, rotary: bool, cross: bool) -> tuple[str, str]:
    """(formula suffix, why not plain) for step 2."""
    if plain:
        return "", ""
    if cross:
        return " as used", "keys and values come from the other text (cross-attention), so they are shown as used."
    if rotary:
        why = (
            "this model rotates Q and K by their positions after the projection (rotary position embeddings), so "
            "Q and K are shown before and after the rotation, and V as used."
        )
        return " as used", why
    return " as used", (
        "this model changes Q and K after their projections (QK-norm or another step between X · W and the "
        "scores), so Q, K and V are shown as the attention used them, recorded from the model."
    )


def build_steps(
    trace: AttentionTrace,
    head: int,
    *,
    plain: bool,
    weights: AttentionWeights | None = None,
    scaled: bool = True,
    wo_words: str = "W^O is learned with the rest of the model",
) -> list[Step]:
    """Steps 1-7 of one head of a traced layer, every matrix taken from the trace.

    ``weights`` (plain layers) names the biases in the formulas; ``wo_words`` says where this W^O comes from.
    """
    t = trace
    h, n, dk = t.q.shape
    i = int(head)
    g = i // t.group
    nk = int(t.k.shape[1])
    d = int(t.output.shape[1])
    tok, keys = tuple(t.tokens), tuple(t.key_tokens)
    cross = t.part == "cross"
    shared = "" if t.group == 1 else f" (shared by query heads {g * t.group}–{(g + 1) * t.group - 1})"
    bias = {name: weights is not None and getattr(weights, name) is not None for name in ("b_Q", "b_K", "b_V", "b_O")}
    steps: list[Step] = []

    # 1. X
    if t.x.shape[1]:
        x_panels = (Panel(f"X, one row per token   [{n} × {t.x.shape[1]}]", _np(t.x), tok, None, "X"),)
        x_more = ""
    else:
        x_panels, x_more = (), " This model's attention input was not recorded, so X is not drawn here."
    steps.append(
        Step(
            1,
            f"X, the input [{n} × {t.x.shape[1] or d}]",
            f"Every token of the text is one row of X, a vector of d_model = {t.x.shape[1] or d} numbers. In a "
            "trained model these rows are the hidden states that arrive at this layer (the word plus what the "
            "layers below already mixed in); the first layer sees the embeddings." + x_more,
            x_panels,
            "Step by step",
            "every matrix of any head, side by side",
        )
    )

    # 2. Q, K, V
    suffix, why = _qkv_words(plain, t.q_pre is not None, cross)

    def formula(m: str, w: str, j: int, b: str) -> str:
        return f"{m} = X · {w}^{j}" + (f" + {b}^{j}" if bias[b] else "")

    q_name = formula(f"Q_{i}", "W_Q", i, "b_Q") if plain else f"Q_{i}{suffix}"
    k_name = formula(f"K_{g}", "W_K", g, "b_K") if plain else f"K_{g}{suffix}"
    v_name = formula(f"V_{g}", "W_V", g, "b_V") if plain else f"V_{g} as used"
    panels = [
        Panel(f"{q_name}   [{n} × {dk}]", _np(t.q[i]), tok, None, "Q"),
        Panel(f"{k_name}   [{nk} × {dk}]", _np(t.k[g]), keys, None, "K"),
        Panel(f"{v_name}   [{nk} × {dk}]", _np(t.v[g]), keys, None, "V"),
    ]
    if t.q_pre is not None and t.k_pre is not None:  # rotary: X · W first, then Q and K rotated (a second row)
        panels = [
            Panel(f"Q_{i} = X · W_Q^{i}, before rotation   [{n} × {dk}]", _np(t.q_pre[i]), tok, None, "Q"),
            Panel(f"K_{g} = X · W_K^{g}, before rotation   [{nk} × {dk}]", _np(t.k_pre[g]), keys, None, "K"),
            panels[2],
            Panel(f"Q_{i} rotated (as used)   [{n} × {dk}]", _np(t.q[i]), tok, None, "Q"),
            Panel(f"K_{g} rotated (as used)   [{nk} × {dk}]", _np(t.k[g]), keys, None, "K"),
        ]
    text2 = (
        f"Each head has its own three projections, d_model × d_k = {t.x.shape[1] or d} × {dk}. They map every "
        f"token to a query (what it looks for), a key (what it offers) and a value (what it passes on), in a "
        f"space of only d_k = {dk} dimensions: one head sees the tokens from one angle, and {h} heads from "
        f"{h} angles."
    )
    if plain and any(bias[b] for b in ("b_Q", "b_K", "b_V")):
        text2 += " This layer adds a bias after each projection (the + b in the titles)."
    elif plain and weights is not None:
        text2 += " This layer has no bias in these projections."
    if why:
        text2 += " Here " + why
    if t.group > 1:
        text2 += (
            f" Grouped-query attention: {h} query heads share {h // t.group} key/value heads, so K and V of head "
            f"{i} are those of K/V head {g}{shared}."
        )
    steps.append(
        Step(
            2,
            f"Q, K, V of head {i}",
            text2,
            tuple(panels),
            "Head count",
            "how d_k shrinks as the number of heads grows",
        )
    )

    # 3. Q Kᵀ
    raw = _np(t.q[i]) @ _np(t.k[g]).T  # [n, nk]
    steps.append(
        Step(
            3,
            f"Q_{i} K_{g}ᵀ: every query against every key",
            f"Row m, column j is the dot product of token m's query with token j's key: large when they point the "
            f"same way. One number per pair of tokens, so the matrix is n × n = {n} × {nk} and grows with the "
            "square of the text's length.",
            (Panel(f"Q_{i} K_{g}ᵀ   [{n} × {nk}]", raw, tok, keys, "QKᵀ"),),
            "Compare heads",
            "the same scores, head against head",
        )
    )

    # 4. scale
    scaled_m = raw * t.scale
    if scaled:
        text4 = (
            f"Dot products of {dk}-dimensional vectors grow with d_k, and large scores push the softmax to put "
            f"all weight on one key. So the scores are multiplied by {t.scale:.4g}"
            + (" = 1/√d_k." if abs(t.scale - dk**-0.5) < 1e-9 else " (this model's own scale).")
            + " Turn the scaling off in the sidebar to watch the softmax saturate."
        )
        title4 = f"× {t.scale:.4g}" + (" = 1/√d_k" if abs(t.scale - dk**-0.5) < 1e-9 else " (the model's scale)")
    else:
        text4 = "Scaling is off in the sidebar, so the scores are used as they are (× 1): see how peaked step 6 gets."
        title4 = "× 1 (scaling off)"
    panels4 = [Panel(f"Q_{i} K_{g}ᵀ {title4}   [{n} × {nk}]", scaled_m, tok, keys, "scaled")]
    if t.softcap is not None:
        capped = np.tanh(scaled_m / t.softcap) * t.softcap
        panels4.append(
            Panel(f"soft-capped: {t.softcap:g} · tanh(· / {t.softcap:g})   [{n} × {nk}]", capped, tok, keys, "capped")
        )
        text4 += f" This model then soft-caps the scores to ±{t.softcap:g}."
    if t.bias is not None:
        b = _np(t.bias[min(i, t.bias.shape[0] - 1)])
        panels4.append(Panel(f"+ position bias (added by the model)   [{n} × {nk}]", b, tok, keys, "bias"))
        text4 += " It also adds a learned bias that depends on the distance between the two tokens."
    steps.append(
        Step(
            4,
            f"Scale ({title4})",
            text4,
            tuple(panels4),
            "Step by step",
            "the scaled scores next to every other matrix of the head",
        )
    )

    # 5. mask
    scores = _np(t.scores[i])
    kind, sentence = mask_kind(np.isfinite(scores))
    steps.append(
        Step(
            5,
            f"Mask: {kind}",
            sentence + " A masked pair gets the score −∞ (shown blank), so the softmax gives it weight exactly 0. "
            "Toggle the causal mask in the sidebar to see a decoder's view of the same text.",
            (Panel(f"masked scores (blank = −∞)   [{n} × {nk}]", scores, tok, keys, "score", "scores"),),
            "Heads",
            "the causal toggle on all heads at once",
        )
    )

    # 6. softmax
    dead = " Rows with every key masked are all zeros." if t.any_dead_rows else ""
    steps.append(
        Step(
            6,
            "Softmax, row by row",
            "Each row is turned into weights that are positive and sum to 1: how token m spreads its attention "
            "over the keys. The softmax runs along each row separately (over the whole matrix would mix "
            "different queries)." + dead,
            (
                Panel(
                    f"weights = softmax(scores) per row   [{n} × {nk}]",
                    _np(t.pattern[i]),
                    tok,
                    keys,
                    "weight",
                    "weights",
                ),
            ),
            "Where does it look?",
            "one token's row, in every head and layer",
        )
    )

    # 7. · V, concat, · W^O
    b_o = " + b_O" if t.b_O is not None else ""
    steps.append(
        Step(
            7,
            f"· V, concat all heads, · W^O{b_o}",
            f"Head {i}'s output row m is the weighted sum of the value rows: weights · V. The {h} heads' outputs "
            f"[{n} × {dk}] are put side by side, [{n} × {h * dk}], and multiplied by W^O ({h * dk} × {d}) to give "
            f"the layer's output. {wo_words}. Its job: decide how much of each head goes where, instead of treating "
            "every head alike.",
            (
                Panel(f"head_{i} = weights · V_{g}   [{n} × {dk}]", _np(t.z[i]), tok, None, "z"),
                Panel(f"concat(head_0 … head_{h - 1})   [{n} × {h * dk}]", _np(t.concat), tok, None, "concat"),
                Panel(f"output = concat · W^O{b_o}   [{n} × {d}]", _np(t.output), tok, None, "output"),
            ),
            "W^O",
            "W^O itself, and what each head adds after it",
        )
    )
    return steps


# --- the two claims ------------------------------------------------------------------------------------
def _masked_softmax(s: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax with masked cells at −∞; all-masked rows are zeros. Shapes: s, allowed [.., n, nk]."""
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
    return p.nan_to_num(0.0)


def _score_extras(s: torch.Tensor, trace: AttentionTrace, head: int | None) -> torch.Tensor:
    """Soft-cap and position bias, as the model applies them after scaling."""
    if trace.softcap is not None:
        s = torch.tanh(s / trace.softcap) * trace.softcap
    if trace.bias is not None:
        b = trace.bias.to(torch.float64)  # [h | 1, n, nk]
        s = s + (b if head is None else b[min(head, b.shape[0] - 1)])
    return s


def loop_vs_batched(trace: AttentionTrace, weights: AttentionWeights | None, x: torch.Tensor | None) -> Equivalence:
    """A Python loop over heads against the one-big-matrix form, both in float64, on this layer as traced
    (its scale, mask, W^O and b_O). With ``weights`` (plain layers) both start from X: the loop uses each
    head's own d_model × d_k matrices; the big form one d_model × h·d_k projection reshaped into heads.
    Without, both start from the recorded q, k, v. Shapes: x [n, d_model]; returns outputs [n, d_model]."""
    f64 = torch.float64
    allowed = torch.isfinite(trace.scores)  # [h, n, nk]: the mask as the layer used it
    h, n, dk = trace.q.shape
    w_o = trace.W_O.to(f64)  # [h, dk, d]
    b_o = None if trace.b_O is None else trace.b_O.to(f64)
    group = trace.group
    with torch.no_grad():
        if weights is not None and x is not None:
            w = weights.to("cpu", f64)
            xd = x.to(f64)  # [n, d]

            def head_proj(wm: torch.Tensor, b: torch.Tensor | None, j: int) -> torch.Tensor:
                return xd @ wm[j] + (0 if b is None else b[j])  # [n, dk]

            def big_proj(wm: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
                c = wm.shape[0]
                full = wm.permute(1, 0, 2).reshape(wm.shape[1], c * dk)  # [d, c*dk]: one big matrix
                y = xd @ full + (0 if b is None else b.reshape(-1))  # [n, c*dk]
                return y.view(n, c, dk).transpose(0, 1)  # [c, n, dk]

            loop_q = [head_proj(w.W_Q, w.b_Q, j) for j in range(h)]
            loop_k = [head_proj(w.W_K, w.b_K, j // group) for j in range(h)]
            loop_v = [head_proj(w.W_V, w.b_V, j // group) for j in range(h)]
            big_q, big_k, big_v = big_proj(w.W_Q, w.b_Q), big_proj(w.W_K, w.b_K), big_proj(w.W_V, w.b_V)
            biased = " (with their biases)" if weights.b_Q is not None or weights.b_K is not None else ""
            note = f"Both start from X and this layer's W_Q, W_K, W_V{biased}."
        else:
            q, k, v = trace.q.to(f64), trace.k.to(f64), trace.v.to(f64)
            loop_q = [q[j] for j in range(h)]
            loop_k = [k[j // group] for j in range(h)]
            loop_v = [v[j // group] for j in range(h)]
            big_q, big_k, big_v = q, k, v
            note = (
                "This layer's Q and K are not plain linear maps of X (or X was not recorded), so both start from the "
                "q, k, v the model recorded: a Python loop over heads against one batched einsum."
            )
        heads = []
        for j in range(h):  # the small-matrices form
            s = _score_extras((loop_q[j] @ loop_k[j].T) * trace.scale, trace, j)  # [n, nk]
            heads.append(_masked_softmax(s, allowed[j]) @ loop_v[j])  # [n, dk]
        loop_out = torch.cat(heads, dim=1) @ w_o.reshape(h * dk, -1)  # [n, d]
        # the one-big-matrix form: all heads in one batched product
        k_all = big_k.repeat_interleave(group, dim=0)  # [h, nk, dk]
        v_all = big_v.repeat_interleave(group, dim=0)
        s_all = _score_extras(torch.einsum("hqd,hkd->hqk", big_q, k_all) * trace.scale, trace, None)  # [h, n, nk]
        z_all = torch.einsum("hqk,hkd->hqd", _masked_softmax(s_all, allowed), v_all)  # [h, n, dk]
        big_out = z_all.transpose(0, 1).reshape(n, h * dk) @ w_o.reshape(h * dk, -1)  # [n, d]
        if b_o is not None:
            loop_out, big_out = loop_out + b_o, big_out + b_o
    return Equivalence(
        "loop over heads, concat, · W^O", "one big matrix, batched", loop_out.numpy(), big_out.numpy(), note
    )


def identity_blocker(plain: bool, n_heads: int, n_kv_heads: int, d_head: int, d_model: int) -> str | None:
    """Why claim (b) cannot be shown on this layer, or None when it can."""
    if not plain:
        return (
            "this layer's Q and K are not plain linear maps of X (rotary embeddings, QK-norm or cross-attention), "
            "so its heads cannot be re-split into one head of width d_model"
        )
    if n_kv_heads != n_heads:
        return f"{n_heads} query heads share {n_kv_heads} key/value heads (grouped-query attention): no single head"
    if n_heads * d_head != d_model:
        return f"the heads' width {n_heads} × {d_head} is not d_model = {d_model}, so W^O = I does not fit"
    return None


def identity_equivalence(
    weights: AttentionWeights, x: torch.Tensor, scaled: bool = True, allowed: torch.Tensor | None = None
) -> Equivalence:
    """Claim (b): MultiHead with h = 1 and W^O = I against softmax(X W_Q (X W_K)ᵀ / √d) X W_V (float64).
    Shapes: x [n, d_model]; allowed [n, n] bool (the layer's mask) or None; returns [n, d_model] each."""
    mha, plain = single_head_identity(weights, x, scaled=scaled, allowed=allowed)
    return Equivalence(
        "MultiHead, h = 1, W^O = I",
        "softmax(X W_Q (X W_K)ᵀ / √d) X W_V",
        mha.numpy(),
        plain.numpy(),
        "Both use this layer's own projections, re-split into one head of width d_model.",
    )


def wo_origin(own: bool, init: str = "xavier", loaded: bool = False, seed: int = 0) -> str:
    """Where this W^O comes from, in words: learned only for a trained model."""
    if not own:
        return "W^O is learned (the model was trained with it)"
    if loaded:
        return "W^O comes from the weights file you loaded (mha-viz cannot tell whether it was trained)"
    if init == "identity":
        return "This W^O is not learned: the identity init in the sidebar sets it to I (the plain concat)"
    return f"This W^O is not learned: it is a random {init} initialisation (seed {seed}), as set in the sidebar"

"""The Lesson tab's content as data: the seven steps of multi-head attention on one traced layer
(no Streamlit, no Plotly).

    build_steps(trace, head, ...) -> [Step 1 … Step 7]   each with its real matrices (the trace's)
    (the two claims, loop == one big matrix and h = 1 with W^O = I == plain attention: mha_viz/studies/claims.py)
    default_head(pattern, queries, keys) -> (int, str)    the head shown first (analysis.opening's rule)
    focus_row(queries) -> int | None                      the row marked in the matrices ("it")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mha_viz.analysis.opening import layer_opening, opening_pair
from mha_viz.analysis.referents import specific_head
from mha_viz.analysis.steps import Step as MatrixStep
from mha_viz.analysis.steps import head_steps, latent_cache, scale_title
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


# --- the default head ----------------------------------------------------------------------------------
def focus_row(queries: Sequence[str]) -> int | None:
    """The query row the lesson marks in its matrices: the row default_head reads ("it"), else None."""
    pair = opening_pair(queries)
    return None if pair is None else pair[0]


def default_head(pattern: np.ndarray, queries: Sequence[str], keys: Sequence[str]) -> tuple[int, str]:
    """The head to show first, and why: analysis.opening's rule inside this layer (the head where "it"'s weight
    on "animal" stands out most from the other tokens' weight on "animal", as the app and the notebook open);
    head 0 when the text has no such pair. ``queries``/``keys`` are the readable pieces (case ignored).
    Shapes: pattern [h, n_q, n_k]."""
    head = layer_opening(pattern, queries, keys)
    if head is None:
        return 0, "head 0 (this text has no “it” → “animal” pair to look for)"
    q, k = opening_pair(queries, keys)  # type: ignore[misc]  (layer_opening found it)
    _, _, weight, others, _ = specific_head(np.asarray(pattern)[None], q, k)
    return head, (
        f"head {head}: of this layer's heads, the one where “{queries[q].strip()}” attends to “{keys[k].strip()}” "
        f"({weight:.2f}) most unlike the other tokens ({others:.2f} on average)"
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


def _panel(s: MatrixStep, t: AttentionTrace) -> Panel:
    """One of head_steps' matrices as a Lesson panel: the same values, title and shape (one definition of each)."""
    tok, keys = tuple(t.tokens), tuple(t.key_tokens)
    rows = s.row_labels or (keys if s.key_rows else tok)
    cols = keys if s.keys else s.col_labels
    kind = "scores" if s.name == "scores" else "weights" if s.name == "weight" else "signed"
    return Panel(f"{s.title}   {s.shape}", s.z, rows, cols, s.name, kind)


def build_steps(
    trace: AttentionTrace,
    head: int,
    *,
    plain: bool,
    weights: AttentionWeights | None = None,
    scaled: bool = True,
    wo_words: str = "W^O is learned with the rest of the model",
) -> list[Step]:
    """Steps 1-7 of one head of a traced layer: the matrices are analysis.steps.head_steps' (what Step by step and
    the export show, extra steps of latent, differential and gated attention included), with the Lesson's words.

    ``weights`` (plain layers) names the biases in the formulas; ``wo_words`` says where this W^O comes from.
    """
    t = trace
    h, n, dk = t.q.shape
    i = int(head)
    g = i // t.group
    nk = int(t.k.shape[1])
    d = int(t.output.shape[1])
    cross = t.part == "cross"
    shared = "" if t.group == 1 else f" (shared by query heads {g * t.group}–{(g + 1) * t.group - 1})"
    biases = [b for b in ("b_Q", "b_K", "b_V") if weights is not None and getattr(weights, b) is not None]
    matrices = head_steps(t, i, scaled=scaled, plain=plain, biases=biases)

    def panels(number: int) -> tuple[Panel, ...]:
        return tuple(_panel(s, t) for s in matrices if s.number == number)

    steps: list[Step] = []

    # 1. X
    x_more = "" if t.x.shape[1] else " This model's attention input was not recorded, so X is not drawn here."
    steps.append(
        Step(
            1,
            f"X, the input [{n} × {t.x.shape[1] or d}]",
            f"Every token of the text is one row of X, a vector of d_model = {t.x.shape[1] or d} numbers. In a "
            "trained model these rows are the hidden states that arrive at this layer (the word plus what the "
            "layers below already mixed in); the first layer sees the embeddings." + x_more,
            panels(1),
            "Step by step",
            "every matrix of any head, side by side",
        )
    )

    # 2. Q, K, V
    _, why = _qkv_words(plain, t.q_pre is not None, cross)
    text2 = (
        f"Each head has its own three projections, d_model × d_k = {t.x.shape[1] or d} × {dk}. They map every "
        f"token to a query (what it looks for), a key (what it offers) and a value (what it passes on), in a "
        f"space of only d_k = {dk} dimensions: one head sees the tokens from one angle, and {h} heads from "
        f"{h} angles."
    )
    if plain and biases:
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
    if t.latent is not None:
        text2 += (
            " Latent attention: K and V are not projected from X directly but from one small latent c_KV per "
            "token, the only thing the cache keeps besides the shared rotary key part. " + latent_cache(t)
        )
    steps.append(
        Step(2, f"Q, K, V of head {i}", text2, panels(2), "Head count", "how d_k shrinks as the number of heads grows")
    )

    # 3. Q Kᵀ
    steps.append(
        Step(
            3,
            f"Q_{i} K_{g}ᵀ: every query against every key",
            f"Row m, column j is the dot product of token m's query with token j's key: large when they point the "
            f"same way. One number per pair of tokens, so the matrix is n × n = {n} × {nk} and grows with the "
            "square of the text's length.",
            panels(3),
            "Compare heads",
            "the same scores, head against head",
        )
    )

    # 4. scale
    title4 = scale_title(t.scale, dk, scaled)
    if scaled:
        text4 = (
            f"Dot products of {dk}-dimensional vectors grow with d_k, and large scores push the softmax to put "
            f"all weight on one key. So the scores are multiplied by {t.scale:.4g}"
            + (" = 1/√d_k." if abs(t.scale - dk**-0.5) < 1e-9 else " (this model's own scale).")
            + " Turn the scaling off in the sidebar to watch the softmax saturate."
        )
    else:
        text4 = "Scaling is off in the sidebar, so the scores are used as they are (× 1): see how peaked step 6 gets."
    if t.softcap is not None:
        text4 += f" This model then soft-caps the scores to ±{t.softcap:g}."
    if t.bias is not None:
        text4 += " It also adds a learned bias that depends on the distance between the two tokens."
    steps.append(
        Step(4, f"Scale ({title4})", text4, panels(4), "Step by step", "the scaled scores next to every other matrix")
    )

    # 5. mask
    kind, sentence = mask_kind(np.isfinite(_np(t.scores[i])))
    steps.append(
        Step(
            5,
            f"Mask: {kind}",
            sentence + " A masked pair gets the score −∞ (shown blank), so the softmax gives it weight exactly 0. "
            "Toggle the causal mask in the sidebar to see a decoder's view of the same text.",
            panels(5),
            "Heads",
            "the causal toggle on all heads at once",
        )
    )

    # 6. softmax
    dead = " A row with every key masked spreads evenly over all keys (eager softmax)." if t.any_dead_rows else ""
    steps.append(
        Step(
            6,
            "Softmax, row by row",
            "Each row is turned into weights that are positive and sum to 1: how token m spreads its attention "
            "over the keys. The softmax runs along each row separately (over the whole matrix would mix "
            "different queries)." + dead,
            panels(6),
            "Where does it look?",
            "one token's row, in every head and layer",
        )
    )

    # 7. · V, concat, · W^O
    b_o = " + b_O" if t.b_O is not None else ""
    text7 = (
        f"Head {i}'s output row m is the weighted sum of the value rows: weights · V. The {h} heads' outputs "
        f"[{n} × {t.z.shape[-1]}] are put side by side, [{n} × {t.concat.shape[-1]}], and multiplied by W^O "
        f"({t.concat.shape[-1]} × {d}) to give the layer's output. {wo_words}. Its job: decide how much of each head "
        "goes where, instead of treating every head alike."
    )
    if t.differential is not None:
        text7 += (
            " Differential attention: heads come in pairs, and the pair's two softmax maps are subtracted (the "
            "second weighted by a learned λ) before the values are read, which cancels attention both maps share."
        )
    if t.routing is not None:
        text7 += (
            " Mixture of attention heads: a router picks each token's experts, and each token's heads go through the "
            "output projections (W^O) of the experts it was routed to, weighted by the router's gates."
        )
    if t.wo_input is not None:
        text7 += " This model gates or normalises the heads' outputs before W^O: W^O reads that, shown too."
    steps.append(
        Step(
            7,
            f"· V, concat all heads, · W^O{b_o}",
            text7,
            panels(7),
            "W^O",
            "W^O itself, and what each head adds after it",
        )
    )
    return steps


def wo_origin(own: bool, init: str = "xavier", loaded: bool = False, seed: int = 0) -> str:
    """Where this W^O comes from, in words: learned only for a trained model."""
    if not own:
        return "W^O is learned (the model was trained with it)"
    if loaded:
        return "W^O comes from the weights file you loaded (mha-viz cannot tell whether it was trained)"
    if init == "identity":
        return "This W^O is not learned: the identity init in the sidebar sets it to I (the plain concat)"
    return f"This W^O is not learned: it is a random {init} initialisation (seed {seed}), as set in the sidebar"

"""The Step by step tab: one head's computation, from X to the layer's output, matrix by matrix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import streamlit as st

from mha_viz import pipeline
from mha_viz.config import Config
from mha_viz.figures import matrix_heatmap
from mha_viz.figures.common import plural
from mha_viz.ui.cache import get_own_weights, model_of, recording_of
from mha_viz.ui.common import downloads, plot
from mha_viz.ui.context import Ctx, valid_choice
from mha_viz.ui.memo import sized_cache


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


@sized_cache(max_entries=32, max_mb=1)
def layer_biases(config: Config, text: str, target: str | None, part: str, layer: int) -> tuple[str, ...]:
    """Which of b_Q, b_K, b_V a plain-linear layer has (its weights are read once, not kept)."""
    if config.own:
        w = get_own_weights(config)
    else:
        w = pipeline.layer_weights(model_of(config), recording_of(config, text, target), part, layer)
    return tuple(n for n in ("b_Q", "b_K", "b_V") if getattr(w, n) is not None)


def step_view(ctx: Ctx) -> None:
    ctx.hiding_not_applied("every step shows the matrices exactly as the model computes them.")
    t = ctx.trace()
    h, n, dk = t.q.shape
    nk = t.k.shape[1]
    d = t.output.shape[1]
    valid_choice("step_head", list(range(h)), 0)
    i = int(
        st.selectbox("Head", list(range(h)), key="step_head", format_func=lambda j: f"head {j}", bind="query-params")
    )
    st.caption(
        f"{ctx.where.capitalize()}, head {i}: n = {plural(n, 'token')}, d_model = {d}, d_k = {dk}. The numbers "
        "follow the seven steps: 1 X, 2 Q, K, V, 3 QKᵀ, 4 scaling, 5 mask, 6 softmax, 7 weights · V, concat, · W^O. "
        "Toggle the scaling and the causal mask in the sidebar. The seed 000 worked example is one click away there."
    )
    tok, keys = list(t.tokens), list(t.key_tokens)
    g = i // t.group  # the key/value head this query head uses (differs only with grouped-query attention)
    shared = "" if t.group == 1 else f" (heads {g * t.group}–{(g + 1) * t.group - 1})"
    plain = ctx.base.plain
    if not plain:
        st.caption(
            "This layer changes queries and keys after their projections (rotary position embeddings, QK-norm) or "
            "takes keys from another text, so Q, K and V are shown as the attention used them, recorded from "
            f"the model.{' K and V are shared by a group of query heads (grouped-query attention).' if shared else ''}"
        )
    biases = layer_biases(ctx.config, ctx.c.text, ctx.target, ctx.part, ctx.layer) if plain else ()
    raw = (t.q[i] @ t.k[g].T).numpy()  # [n, nk] before scaling
    scaled = raw * t.scale
    qs, ks = f"[{n} × {dk}]", f"[{nk} × {dk}]"
    sq = f"[{n} × {nk}]"

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
    rotated = " rotated (rotary positions)" if t.q_pre is not None else " as used"
    steps += [
        Step(2, proj("Q", i) if plain else f"Q_{i}{rotated}", t.q[i].numpy(), False, "Q", True, qs),
        Step(2, (proj("K", g) if plain else f"K_{g}{rotated}") + shared, t.k[g].numpy(), False, "K", True, ks, True),
        Step(2, (proj("V", g) if plain else f"V_{g} as used") + shared, t.v[g].numpy(), False, "V", True, ks, True),
        Step(3, f"Q_{i} K_{g}ᵀ", raw, True, "QKᵀ", True, sq),
        Step(
            4,
            scale_title(t.scale, dk, ctx.config.scaled), scaled, True, "scaled", True, sq,
        ),
    ]  # fmt: skip
    if t.softcap is not None:
        capped = np.tanh(scaled / t.softcap) * t.softcap
        steps.append(Step(4, f"soft-cap: {t.softcap:g} · tanh(· / {t.softcap:g})", capped, True, "capped", True, sq))
    if t.bias is not None:
        bias = t.bias[min(i, t.bias.shape[0] - 1)].numpy()
        steps.append(Step(4, "+ position bias (added by the model)", bias, True, "bias", True, sq))
    masked = "causal: future keys → −∞, shown grey" if t.causal else "masked keys → −∞, shown grey"
    out = "output = concat · W^O" + (" + b_O" if t.b_O is not None else "")
    steps += [
        Step(5, f"mask ({masked})", t.scores[i].numpy(), True, "scores", True, sq),
        Step(6, "softmax, row by row (each row sums to 1)", t.pattern[i].numpy(), True, "weight", False, sq),
        Step(7, f"head_{i} = weights · V_{g}", t.z[i].numpy(), False, "z", True, qs),
        Step(7, f"concat(head_0 … head_{h - 1})", t.concat.numpy(), False, "concat", True, f"[{n} × {h * dk}]"),
        Step(7, out, t.output.numpy(), False, "output", True, f"[{n} × {d}]"),
    ]
    for j, (s, title) in enumerate(zip(steps, numbered(steps), strict=True)):
        if j % 2 == 0:  # one row of two per pair: read left to right, and in order when columns stack (narrow screens)
            cols = st.columns(2)
        with cols[j % 2]:
            fig = matrix_heatmap(
                s.z,
                keys if s.keys else None,
                keys if s.key_rows else tok,
                f"{title}   {s.shape}",
                diverging=s.signed,
                value_name=s.name,
                attention=s.name == "weight",
                height=380,
            )
            plot(fig, f"step_{j}", ctx.c.image_format)
    downloads(
        "step",
        npz={
            "tokens": np.asarray(tok, dtype=str),
            "key_tokens": np.asarray(keys, dtype=str),
            "x": t.x.numpy(),
            "q": t.q[i].numpy(),
            "k": t.k[g].numpy(),
            "v": t.v[g].numpy(),
            "kv_head": np.asarray(g),
            "qk": raw,
            "scores": t.scores[i].numpy(),
            "pattern": t.pattern[i].numpy(),
            "z": t.z[i].numpy(),
            "concat": t.concat.numpy(),
            "output": t.output.numpy(),
        },
    )

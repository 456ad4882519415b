"""The Step by step tab: one head's computation, from X to the layer's output, matrix by matrix."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.figures import matrix_heatmap
from mha_viz.ui.common import downloads, plot
from mha_viz.ui.context import Ctx, valid_choice


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
        f"{ctx.where.capitalize()}, head {i}: n = {n} tokens, d_model = {d}, d_k = {dk}. Toggle the scaling and the "
        "causal mask in the sidebar. The seed 000 worked example is one click away there."
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
    raw = (t.q[i] @ t.k[g].T).numpy()  # [n, nk] before scaling
    scaled = raw * t.scale
    steps = []
    if t.x.shape[1]:
        steps.append(("1. X (one row per token)", t.x.numpy(), None, "X", True, f"[{n} × {t.x.shape[1]}]"))
    if t.q_pre is not None and t.k_pre is not None:  # rotary embeddings: Q and K before and after rotation
        steps += [
            (f"2. Q_{i} = X · W_Q[{i}], before rotation", t.q_pre[i].numpy(), None, "Q", True, f"[{n} × {dk}]"),
            (f"2. K_{g} = X · W_K[{g}], before rotation{shared}", t.k_pre[g].numpy(), None, "K", True,
             f"[{nk} × {dk}]"),
        ]  # fmt: skip
    rotated = " rotated (rotary positions)" if t.q_pre is not None else " as used"
    steps += [
        (f"2. Q_{i}" + (f" = X · W_Q[{i}]" if plain else rotated), t.q[i].numpy(), None, "Q", True, f"[{n} × {dk}]"),
        (
            f"2. K_{g}" + (f" = X · W_K[{g}]" if plain else rotated) + shared,
            t.k[g].numpy(),
            None,
            "K",
            True,
            f"[{nk} × {dk}]",
        ),
        (
            f"2. V_{g}" + (f" = X · W_V[{g}]" if plain else " as used") + shared,
            t.v[g].numpy(),
            None,
            "V",
            True,
            f"[{nk} × {dk}]",
        ),
        (f"3. Q_{i} K_{g}ᵀ", raw, keys, "QKᵀ", True, f"[{n} × {nk}]"),
        (
            f"3. × {t.scale:.4g}" + (" (the model's scale)" if ctx.config.scaled else " (scaling off)"),
            scaled,
            keys,
            "scaled",
            True,
            f"[{n} × {nk}]",
        ),
    ]
    if t.softcap is not None:
        capped = np.tanh(scaled / t.softcap) * t.softcap
        steps.append((f"3. soft-cap: {t.softcap:g} · tanh(· / {t.softcap:g})", capped, keys, "capped", True, ""))
    if t.bias is not None:
        bias = t.bias[min(i, t.bias.shape[0] - 1)].numpy()
        steps.append(("3. + position bias (added by the model)", bias, keys, "bias", True, f"[{n} × {nk}]"))
    masked = "causal: future keys → −∞, shown blank" if t.causal else "masked keys → −∞, shown blank"
    steps += [
        (f"3. mask ({masked})", t.scores[i].numpy(), keys, "scores", True, f"[{n} × {nk}]"),
        ("4. softmax, row by row (each row sums to 1)", t.pattern[i].numpy(), keys, "weight", False, f"[{n} × {nk}]"),
        (f"5. head_{i} = weights · V_{g}", t.z[i].numpy(), None, "z", True, f"[{n} × {dk}]"),
        (f"6. concat(head_0 … head_{h - 1})", t.concat.numpy(), None, "concat", True, f"[{n} × {h * dk}]"),
        ("7. output = concat · W^O + b_O", t.output.numpy(), None, "output", True, f"[{n} × {d}]"),
    ]
    cols = st.columns(2)
    for j, (title, z, xlab, name, signed, shape) in enumerate(steps):
        with cols[j % 2]:
            fig = matrix_heatmap(
                z,
                xlab,
                tok if name not in ("K", "V") else keys,
                f"{title}   {shape}",
                diverging=signed,
                value_name=name,
                attention=name == "weight",
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

"""The Step by step tab: one head's computation, from X to the layer's output, matrix by matrix."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz import pipeline
from mha_viz.config import Config
from mha_viz.figures import matrix_heatmap
from mha_viz.figures.common import plural
from mha_viz.steps import head_steps, numbered
from mha_viz.ui.cache import get_own_weights, model_of, recording_of
from mha_viz.ui.common import downloads, plot
from mha_viz.ui.context import Ctx, follow_head
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.timing import timed_fragment
from mha_viz.ui.window import row_window

WINDOW_ROWS = 128  # query rows per matrix beyond 128 tokens (as the Lesson's)


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
    _one_head(ctx)


@st.fragment
@timed_fragment
def _one_head(ctx: Ctx) -> None:
    """The head picker and its steps: a fragment, so choosing another head reruns only this part."""
    t = ctx.trace()
    h, n, dk = t.q.shape
    d = t.output.shape[1]
    took = follow_head(ctx, "step_head", h)  # the opened head (a choice here opens it everywhere)
    i = int(
        st.selectbox("Head", list(range(h)), key="step_head", format_func=lambda j: f"head {j}", bind="query-params",
                     on_change=took)
    )  # fmt: skip
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
    raw = (t.q[i] @ t.k[g].T).numpy()  # [n, nk] before scaling (exported below)
    steps = head_steps(t, i, ctx.config.scaled, plain, biases)
    rows = row_window(n, WINDOW_ROWS, "step_rows", "each matrix whose rows are the query tokens")
    cut = "" if rows.stop - rows.start == n else f", rows {rows.start}–{rows.stop - 1}"
    for j, (s, title) in enumerate(zip(steps, numbered(steps), strict=True)):
        if j % 2 == 0:  # one row of two per pair: read left to right, and in order when columns stack (narrow screens)
            cols = st.columns(2)
        with cols[j % 2]:
            fig = matrix_heatmap(
                s.z if s.key_rows else s.z[rows],
                keys if s.keys else None,
                keys if s.key_rows else tok[rows],
                f"{title}   {s.shape}{'' if s.key_rows else cut}",
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

"""The Step by step tab: one head's computation, from X to the layer's output, matrix by matrix."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.steps import Step, head_steps, latent_cache, numbered, variant_steps
from mha_viz.config import WINDOW_ROWS, Config
from mha_viz.figures import matrix_heatmap
from mha_viz.figures.common import plural
from mha_viz.figures.heatmap import HALF_ROW_TITLE_CHARS as TITLE_CHARS
from mha_viz.figures.heatmap import matrix_pair, same_rows
from mha_viz.own_variants import VARIANT_NAMES, VariantSpec, run_variant
from mha_viz.pipeline import road as pipeline
from mha_viz.trace import AttentionTrace, MhaVizError
from mha_viz.ui.cache import get_own_weights, model_of, recording_of
from mha_viz.ui.common import downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.links import plain as escaped
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.opened import follow_head
from mha_viz.ui.timing import timed_fragment
from mha_viz.ui.window import row_window


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
    if t.latent is not None:
        st.caption(
            latent_cache(t) + " Step 2 shows the latent c_KV and the rotary key part k_rope (what is cached), then "
            "the keys and values this head's group reads from them, as the model computed them."
        )
    biases = layer_biases(ctx.config, ctx.c.text, ctx.target, ctx.part, ctx.layer) if plain else ()
    raw = (t.q[i] @ t.k[g].T).numpy()  # [n, nk] before scaling (exported below)
    steps = head_steps(t, i, ctx.config.scaled, plain, biases)
    rows = row_window(n, WINDOW_ROWS, "step_rows", "each matrix whose rows are the query tokens")
    cut = "" if rows.stop - rows.start == n else f", rows {rows.start}–{rows.stop - 1}"
    figures = [
        matrix_heatmap(
            s.z if s.key_rows else s.z[rows],
            keys if s.keys else None,
            keys if s.key_rows else tok[rows],
            f"{title}   {s.shape}{'' if s.key_rows else cut}",
            diverging=s.signed,
            value_name=s.name,
            attention=s.name == "weight",
            height=380,
            title_chars=TITLE_CHARS,
        )
        for s, title in zip(steps, numbered(steps), strict=True)
    ]
    plot_in_pairs(figures, "step", ctx.c.image_format)
    variant_section(ctx, t, i, rows, "step_variant")
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
            **({} if t.latent is None else {"c_kv": t.latent.c_kv.numpy(), "k_rope": t.latent.k_rope.numpy()}),
        },
    )


def variant_spec(config: Config) -> VariantSpec:
    """The own-weights variant the sidebar chose (config.variant and its settings; the seed is the weights')."""
    return VariantSpec(
        config.variant, config.variant_groups, config.variant_width, config.variant_top_k, config.variant_gates,
        config.variant_rank, config.seed,
    )  # fmt: skip


VARIANT_TEXT = {
    "gqa": "GQA: the K/V heads mean-pooled into g consecutive groups (Ainslie et al. 2023); query head i reads group "
    "i // (h / g). g = h is MHA exactly. The K and V groups are [n × g × d_k]; the group head i reads is shown.",
    "mqa": "MQA: every query head reads one K/V head: the mean of all heads' W_K and W_V (GQA with g = 1): "
    "K and V are [n × 1 × d_k].",
    "mohsa": "MOHSA: head i reads the columns [i·d_k − w, (i+1)·d_k + w) of X·W_Q, X·W_K, X·W_V, wrapped around "
    "d_model, and the same rows of W^O; scores scaled by 1/√(d_k + 2w). w = 0 is MHA exactly.",
    "moh": "MoH: a random router W_r [d_model × h] from the seed scores the heads per token (softmax); the top-k heads "
    "are kept and the output is Σ gate · head_i · W^O_i (+ b_O). k = h with equal gates (1) is MHA exactly; k = h "
    "with router gates is MHA with head i's W^O block times the token's router score.",
    "dcmha": "DCMHA: the heads' score maps are mixed across heads before the softmax and the weights after it: "
    "A'_j = A_j + Σ_i A_i (W1 W2)[i, j], rank r (Xiao et al. 2024's compose step). Static: W1, W2 are drawn from "
    "the seed, not computed from the query and key as in the paper. Rank 0 is MHA exactly.",
}


EXPORTED = {
    "mha": "The weights download holds W_Q, W_K, W_V, W_O: this variant is computed from them alone (nothing "
    "else to export).",
    "moh": "The weights download holds only W_Q, W_K, W_V, W_O: the router W_r is not exported; it is remade "
    "from the seed (N(0, 1/d_model)).",
    "dcmha": "The weights download holds only W_Q, W_K, W_V, W_O: the composition W1, W2 are not exported; "
    "they are remade from the seed (N(0, 1/h)).",
}


def variant_section(ctx: Ctx, t: AttentionTrace, i: int, rows: slice, key: str) -> None:
    """Own weights computed as the sidebar's variant: its extra matrices for head ``i`` (nothing for MHA)."""
    config = ctx.config
    if not config.own or config.variant == "mha":
        return
    spec = variant_spec(config)
    st.subheader(f"The layer as {VARIANT_NAMES.get(spec.variant, spec.variant)}")
    st.caption(
        escaped(VARIANT_TEXT.get(spec.variant, ""))
        + " The steps above (and the other views) are plain MHA on the same weights; these are the variant's. "
        + EXPORTED.get(spec.variant, EXPORTED["mha"])
    )
    if not t.x.shape[1]:
        st.info("This trace has no X to recompute the variant from.")
        return
    try:
        res = run_variant(get_own_weights(config), t.x.float(), spec, t.causal, config.scaled)
        steps = variant_steps(res, spec.variant, i, t.output.numpy())
    except MhaVizError as exc:
        st.error(str(exc))
        return
    tok = list(t.tokens)
    figures = [_variant_figure(s, title, tok, rows) for s, title in zip(steps, numbered(steps), strict=True)]
    plot_in_pairs(figures, key, ctx.c.image_format)


def plot_in_pairs(figures: list, key: str, image_format: str) -> None:
    """The matrices two to a row, in order: two whose rows are the same labels as one chart (figures.matrix_pair:
    one chart element instead of two), any other in a half-width column of its own. (A self-attention layer's key
    rows are its query rows unless the query rows are windowed.)"""
    j = 0
    while j < len(figures):
        if j + 1 < len(figures) and same_rows(figures[j], figures[j + 1]):
            plot(matrix_pair(figures[j], figures[j + 1]), f"{key}_{j}", image_format)
            j += 2
            continue
        with st.columns(2)[0]:
            plot(figures[j], f"{key}_{j}", image_format)
        j += 1


def _variant_figure(s: Step, title: str, tok: list[str], rows: slice) -> object:
    """One variant matrix: rows are heads (all shown) or the query tokens (the same window as above)."""
    by_heads = s.row_labels is not None
    z = s.z if by_heads or s.key_rows else s.z[rows]
    ylab = list(s.row_labels) if by_heads else (tok if s.key_rows else tok[rows])
    xlab = list(s.col_labels) if s.col_labels is not None else (tok if s.keys else None)
    return matrix_heatmap(
        z, xlab, ylab, f"{title}   {s.shape}", diverging=s.signed, value_name=s.name,
        attention=s.name == "weight", height=380,
    )  # fmt: skip

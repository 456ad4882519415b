"""Own weights computed as the sidebar's variant (GQA, MQA, MOHSA, MoH, DCMHA): the variant's extra matrices for one
head, two to a row. Drawn by the Lesson and Step by step (a shared ui module: no view imports another view)."""

from __future__ import annotations

import streamlit as st

from mha_viz.analysis.steps import Step, numbered, variant_steps
from mha_viz.config import Config
from mha_viz.own_variants import VARIANT_NAMES, VariantSpec, run_variant
from mha_viz.trace import AttentionTrace, MhaVizError
from mha_viz.ui.cache import get_own_weights
from mha_viz.ui.common import plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.figure_cache import Panel, finished_pairs, panel
from mha_viz.ui.links import plain as escaped


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
    plot_in_pairs(figures, key, ctx.image_format)


def plot_in_pairs(panels: list[Panel], key: str, image_format: str) -> None:
    """The matrices two to a row, in order: two whose rows are the same labels as one chart (figures.matrix_pair:
    one chart element instead of two), any other in a half-width column of its own. (A self-attention layer's key
    rows are its query rows unless the query rows are windowed.) Built once per set of values (ui.figure_cache)."""
    for j, fig, pair in finished_pairs(tuple(panels)):
        if pair:
            plot(fig, f"{key}_{j}", image_format)
            continue
        with st.columns(2)[0]:
            plot(fig, f"{key}_{j}", image_format)


def _variant_figure(s: Step, title: str, tok: list[str], rows: slice) -> Panel:
    """One variant matrix: rows are heads (all shown) or the query tokens (the same window as above)."""
    by_heads = s.row_labels is not None
    z = s.z if by_heads or s.key_rows else s.z[rows]
    ylab = list(s.row_labels) if by_heads else (tok if s.key_rows else tok[rows])
    xlab = list(s.col_labels) if s.col_labels is not None else (tok if s.keys else None)
    return panel(
        z, xlab, ylab, f"{title}   {s.shape}", diverging=s.signed, value_name=s.name,
        attention=s.name == "weight", height=380,
    )  # fmt: skip

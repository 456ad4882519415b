"""The Masks tab: the padding mask on a real padded batch (studies/padding.py), and the causal mask as a what-if."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.plans import masks as plan
from mha_viz.config import Config
from mha_viz.figures import matrix_heatmap
from mha_viz.figures.heatmap import HALF_ROW_TITLE_CHARS
from mha_viz.figures.masks import padded_pattern
from mha_viz.studies.padding import PaddedBatch, own_padded_batch, padded_batch
from mha_viz.ui.cache import get_model, get_recording, model_of
from mha_viz.ui.common import downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.opened import follow_head
from mha_viz.ui.sidebar import MAX_TEXT_CHARS, check_text

PAD_TEXT = "The animal was tired"


@sized_cache(max_entries=8, max_mb=64)
def get_padded(config: Config, first: str, second: str, layer: int) -> PaddedBatch:
    """The two texts as one padded batch (the real model, or own weights through our engine)."""
    if config.own:
        return own_padded_batch(model_of(config), first, second, config)
    lm = get_model(config.model_name, config.model_device)
    return padded_batch(lm, first, second, layer, get_recording(config.model_name, config.model_device, first, None))


def masks_view(ctx: Ctx) -> None:
    ctx.hiding_not_applied("padding is about which positions are real tokens; every position is shown.")
    if len(ctx.base.parts) > 1:
        st.info("The padding demo runs encoders and decoder-only models; pick one in the sidebar.")
        return
    check_text("pad_text", MAX_TEXT_CHARS)
    second = st.text_input(
        "Second sentence, batched with the sidebar's text (press Enter)", PAD_TEXT, key="pad_text",
        bind="query-params", max_chars=MAX_TEXT_CHARS,
    )  # fmt: skip
    pb = get_padded(ctx.config, ctx.text, second, ctx.layer)
    heads = list(range(pb.pattern.shape[1]))
    took = follow_head(ctx, "pad_head", len(heads))  # the opened head (a choice here opens it everywhere)
    i = int(st.selectbox("Head", heads, key="pad_head", format_func=lambda j: f"head {j}", bind="query-params",
                         on_change=took))  # fmt: skip
    row = pb.shorter
    engine = None if ctx.base.own else ctx.base.model_name
    p = plan.masks_plan((pb.lengths[0], pb.lengths[1]), pb.ids.shape[1], row, ctx.where, i, engine)
    st.markdown(p.intro)
    left, right = st.columns(2)
    with left:
        m = p.shown
        fig = padded_pattern(pb.pattern[row, i].numpy()[:m, :m], pb.labels[row][:m], pb.lengths[row], p.title)
        plot(fig, "mask_padded", ctx.image_format)
        for note in p.notes:
            st.caption(note)
        a, b = st.columns(2)
        a.metric("Largest weight on a padded key", f"{pb.pad_key_weight():.3g}")
        b.metric("max |real block − sentence alone|", f"{pb.max_diff():.2g}")
        st.caption(p.block)
    with right:
        _causal(ctx, i)
    downloads(
        "masks",
        npz={
            "ids": pb.ids.numpy(), "mask": pb.mask.numpy(), "pattern": pb.pattern[:, i].numpy(),
            "single_0": pb.single[0][i].numpy(), "single_1": pb.single[1][i].numpy(),
            "labels_0": np.asarray(pb.labels[0], dtype=str), "labels_1": np.asarray(pb.labels[1], dtype=str),
        },
    )  # fmt: skip


def _causal(ctx: Ctx, head: int) -> None:
    """The causal (look-ahead) mask: a what-if on an encoder, part of the model on a decoder."""
    if ctx.base.causal:
        st.markdown(
            "**Causal mask.** This decoder always has one: token t only sees tokens ≤ t, so every pattern (the "
            "padded one too) is lower-triangular. Right padding sits after every real token, so it never changes "
            "what a real token sees."
        )
        return
    t = ctx.trace(x=False, causal=True)
    tok = list(t.tokens)
    title = plan.causal_title(len(tok), ctx.where, head)
    fig = matrix_heatmap(t.pattern[head].numpy(), tok, tok, title, value_name="weight", attention=True,
                         title_chars=HALF_ROW_TITLE_CHARS)  # fmt: skip
    plot(fig, "mask_causal", ctx.image_format)
    st.caption(
        "The causal (look-ahead) mask lets token t see only tokens ≤ t: scores above the diagonal become −∞, so "
        "each row's weights are renormalised over the past. Decoders are trained with it (to predict the next "
        "token without seeing it); this encoder was not, so this is a what-if on the sidebar's sentence."
    )

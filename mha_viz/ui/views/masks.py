"""The Masks tab: the padding mask on a real padded batch (studies/padding.py), and the causal mask as a what-if."""

from __future__ import annotations

import numpy as np
import streamlit as st

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
SHOWN_PADS = 8  # padding positions drawn after the shorter sentence's real tokens


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
    pb = get_padded(ctx.config, ctx.c.text, second, ctx.layer)
    heads = list(range(pb.pattern.shape[1]))
    took = follow_head(ctx, "pad_head", len(heads))  # the opened head (a choice here opens it everywhere)
    i = int(st.selectbox("Head", heads, key="pad_head", format_func=lambda j: f"head {j}", bind="query-params",
                         on_change=took))  # fmt: skip
    row = pb.shorter
    real, n = pb.lengths[row], pb.ids.shape[1]
    engine = "our engine with a key mask (own weights)" if ctx.base.own else f"{ctx.base.model_name}, one forward pass"
    st.markdown(
        f"**Padding mask.** The two sentences ({pb.lengths[0]} and {pb.lengths[1]} tokens) go through as **one "
        f"batch** ({engine}): the shorter one is padded on the right to {n} positions and the attention mask marks "
        "the padding, so its scores become −∞ before the softmax and padded keys get exactly zero weight"
        + ("." if ctx.base.own else " (the model as it is: the sidebar's what-ifs do not apply to this figure).")
    )
    left, right = st.columns(2)
    with left:
        m = n if n <= real + 2 * SHOWN_PADS else real + SHOWN_PADS  # much padding: its block and a few pads
        cut = f", first {m} of {n} positions" if m < n else ""
        title = f"Padded batch [{n} × {n}{cut}]: sentence {row + 1}, {ctx.where}, head {i}"  # (breaks after ":")
        fig = padded_pattern(pb.pattern[row, i].numpy()[:m, :m], pb.labels[row][:m], real, title)
        plot(fig, "mask_padded", ctx.c.image_format)
        if m < n:
            st.caption(
                f"Shown: the {real} real tokens and {m - real} of the {n - real} padding positions; the others are "
                "the same (zero weight as keys, unused as queries). The metrics below cover every position."
            )
        if real == n:
            st.caption("Both sentences have the same length: nothing is padded. Change the second sentence.")
        a, b = st.columns(2)
        a.metric("Largest weight on a padded key", f"{pb.pad_key_weight():.3g}")
        b.metric("max |real block − sentence alone|", f"{pb.max_diff():.2g}")
        st.caption(
            f"Rows 0–{real - 1} and columns 0–{real - 1} are the real tokens: they equal the sentence run alone "
            "(both sentences, every head of this layer, to float rounding). The shaded rows are padded queries: the "
            "model computes them, but nothing downstream reads them."
        )
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
    title = f"What if: causal mask [{len(tok)} × {len(tok)}], {ctx.where}, head {head}"
    fig = matrix_heatmap(t.pattern[head].numpy(), tok, tok, title, value_name="weight", attention=True,
                         title_chars=HALF_ROW_TITLE_CHARS)  # fmt: skip
    plot(fig, "mask_causal", ctx.c.image_format)
    st.caption(
        "The causal (look-ahead) mask lets token t see only tokens ≤ t: scores above the diagonal become −∞, so "
        "each row's weights are renormalised over the past. Decoders are trained with it (to predict the next "
        "token without seeing it); this encoder was not, so this is a what-if on the sidebar's sentence."
    )

"""The Two sentences tab: how much a shared token changes where it looks between two sentences."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis import align_tokens, focus_shift
from mha_viz.figures import paired_bars
from mha_viz.ui.cache import tokens_of
from mha_viz.ui.common import csv_bytes, downloads, layer_head_map, plot
from mha_viz.ui.context import Ctx, needs_pretrained, valid_choice

SECOND_TEXT = "The animal didn't cross the street because it was too wide"
LAST = "the last token (each sentence's own)"


def two_view(ctx: Ctx) -> None:
    if needs_pretrained(ctx):
        return
    ctx.hiding_not_applied("the change is measured on the model's own weights, over every token.")
    text_b = st.text_input(
        "Second sentence (press Enter)", SECOND_TEXT, key="text_b", bind="query-params", max_chars=5000
    )
    tokens_b = tokens_of(ctx.config, text_b)
    a, b = list(ctx.base.tokens.pieces), list(tokens_b.pieces)
    pairs = align_tokens(a, b)
    if not pairs:
        st.warning("The two sentences share no tokens to compare.")
        return
    shared = [ctx.base.tokens.labels[i] for i, _ in pairs]
    choices = {label: pair for label, pair in zip(shared, pairs, strict=True)}
    if ctx.base.causal:
        same = 0  # tokens before the first difference see the same prefix in both sentences
        while same < len(pairs) and pairs[same] == (same, same):
            same += 1
        st.info(
            "Under a causal mask a token sees only what comes before it, so a shared token before the first change "
            f"(here the first {same} tokens, up to “{a[same - 1] if same else '–'}”) attends exactly the same way in "
            "both sentences. The comparison that can differ is at or after the changed word: by default the last "
            "token of each sentence (the one that predicts what comes next)."
        )
        choices = {LAST: (len(a) - 1, len(b) - 1), **{lb: p for lb, p in choices.items() if p[0] >= same}}
    options = list(choices)
    valid_choice("two_focus", options, options[0] if ctx.base.causal or "it" not in options else "it")
    focus = st.selectbox("Focus token (in both sentences)", options, key="two_focus", bind="query-params")
    qa, qb = choices[focus]
    pa, pb = ctx.patterns(), ctx.patterns(text_b)  # [L, H, na, na], [L, H, nb, nb]
    L, H = pa.shape[:2]
    shift = [focus_shift(pa[la], pb[la], qa, qb, pairs) for la in range(L)]
    change = np.stack([s["change"] for s in shift])  # [L, H]
    st.caption(
        f"{len(pairs)} shared tokens aligned (of {len(a)} and {len(b)}). Change = total variation distance "
        "between the focus token's two attention rows (weight on tokens only one sentence has counts fully)."
    )
    title = f"How much “{focus}” changes where it looks, per head"
    layer_head_map(change, title, "change", "two_change", ctx.c.image_format)
    la, he = np.unravel_index(int(np.argmax(change)), change.shape)
    st.markdown(f"Most changed: **layer {la}, head {he}** ({change[la, he]:.3f}).")
    ia, ib = {i for i, _ in pairs}, {j for _, j in pairs}
    only_a = " ".join(p for i, p in enumerate(a) if i not in ia) or "–"
    only_b = " ".join(p for j, p in enumerate(b) if j not in ib) or "–"
    keys = [ctx.base.tokens.labels[i] for i, _ in pairs] + [f"not shared ({only_a} | {only_b})"]
    wa, wb = shift[la]["a"][he], shift[la]["b"][he]
    wa, wb = np.append(wa, max(0.0, 1 - wa.sum())), np.append(wb, max(0.0, 1 - wb.sum()))
    fig = paired_bars(
        keys, wa, wb, ("first sentence", "second sentence"), f"Layer {la}, head {he}: “{focus}” attends to"
    )
    plot(fig, "two_bars", ctx.c.image_format)
    rows = [[la2, he2, f"{change[la2, he2]:.6g}"] for la2 in range(L) for he2 in range(H)]
    downloads("two", csv_data=csv_bytes(["layer", "head", "change"], rows))

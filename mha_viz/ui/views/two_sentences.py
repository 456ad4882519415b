"""Views for the questions people bring: head roles, where a token looks, two sentences, rollout, ablation."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis import ROLE_RULES, align_tokens, focus_shift, rollout
from mha_viz.config import PART_NAMES
from mha_viz.figures import matrix_heatmap, paired_bars, token_bars
from mha_viz.ui.cache import get_ablation, get_roles, tokens_of
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.views import Ctx, _valid_choice

SECOND_TEXT = "The animal didn't cross the street because it was too wide"
ROLE_COLUMNS = ("layer", "head", "label", "prev", "next", "self", "special", "punct", "entropy")


def _needs_pretrained(ctx: Ctx, self_attention: bool = True) -> bool:
    if ctx.base.own:
        st.info(
            "This view looks across the layers of a pretrained model; pick the bundled model or a Hugging Face one."
        )
        return True
    if self_attention and ctx.part == "cross":
        st.info(
            "This view compares tokens of one text with each other; choose encoder or decoder self-attention in the "
            "sidebar (cross-attention relates two different texts)."
        )
        return True
    return False


def _patterns(ctx: Ctx, text: str | None = None) -> np.ndarray:
    """Every layer's pattern for ``text`` (the sidebar's by default). Shapes: [L, H, n, n]."""
    return ctx.patterns(text)


def _layer_head_map(ctx: Ctx, values: np.ndarray, title: str, value_name: str, key: str) -> None:
    """One number per layer × head as a heatmap (rows L0…, columns H0…). Shapes: values [L, H]."""
    L, H = values.shape
    fig = matrix_heatmap(
        values, [f"H{h}" for h in range(H)], [f"L{la}" for la in range(L)], title, value_name=value_name
    )
    plot(fig, key, ctx.c.image_format)


def _open_head(layer: int, head: int) -> None:
    st.session_state.update(layer=layer, head=head, view="Heads")


def roles_view(ctx: Ctx) -> None:
    if _needs_pretrained(ctx):
        return
    rows = get_roles(ctx.config, ctx.c.text, ctx.target, ctx.part)
    st.markdown(
        "Scores per head (Clark et al. 2019, Voita et al. 2019), averaged over the query tokens: **prev** / "
        "**next** / **self** = weight on the previous / next / same token; **special** / **punct** = total weight "
        "on special tokens / punctuation-only tokens; **entropy** = row entropy in nats (high = broad)."
    )
    st.caption(f"Labels: {ROLE_RULES}.")
    table = {c: [r[c] for r in rows] for c in ROLE_COLUMNS}
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        height=420,
        column_config={c: st.column_config.NumberColumn(format="%.3f") for c in ROLE_COLUMNS[3:]},
        key="roles_table",
    )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["label"]] = counts.get(r["label"], 0) + 1
    st.caption("Heads per label: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    body = [[r[c] if isinstance(r[c], str | int) else f"{r[c]:.6g}" for c in ROLE_COLUMNS] for r in rows]
    downloads("roles", csv_data=csv_bytes(ROLE_COLUMNS, body))


def where_view(ctx: Ctx) -> None:
    if _needs_pretrained(ctx, self_attention=False):
        return
    labels, key_labels = list(ctx.base.tokens.labels), list(ctx.base.key_tokens.labels)
    c1, c2 = st.columns(2)
    _valid_choice("where_q", labels, "it" if "it" in labels else labels[0])
    _valid_choice("where_k", key_labels, "animal" if "animal" in key_labels else key_labels[-1])
    q = labels.index(c1.selectbox("Query token", labels, key="where_q", bind="query-params"))
    k = key_labels.index(c2.selectbox("Key token", key_labels, key="where_k", bind="query-params"))
    p = _patterns(ctx)  # [L, H, n_q, n_k]
    weights = p[:, :, q, k]  # [L, H]
    L, H = weights.shape
    title = f"“{labels[q]}” → “{key_labels[k]}”: weight in every layer × head"
    _layer_head_map(ctx, weights, title, "weight", "where_map")
    order = np.argsort(-weights, axis=None)[:10]
    ranked = [(int(i // H), int(i % H), float(weights.flat[i])) for i in order]
    st.markdown("**Top heads** (rank, layer, head, weight):")
    for rank, (la, he, w) in enumerate(ranked, 1):
        a, b = st.columns([4, 1])
        a.write(f"{rank}. layer {la}, head {he}: {w:.3f}")
        b.button("Open", key=f"where_open_{rank}", on_click=_open_head, args=(la, he))
    rows = [[la, he, f"{weights[la, he]:.6g}"] for la in range(L) for he in range(H)]
    downloads("where", csv_data=csv_bytes(["layer", "head", "weight"], rows))


def two_view(ctx: Ctx) -> None:
    if _needs_pretrained(ctx):
        return
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
    _valid_choice("two_focus", shared, "it" if "it" in shared else shared[0])
    focus = st.selectbox("Focus token (in both sentences)", shared, key="two_focus", bind="query-params")
    qa, qb = pairs[shared.index(focus)]
    pa, pb = _patterns(ctx), _patterns(ctx, text_b)  # [L, H, na, na], [L, H, nb, nb]
    L, H = pa.shape[:2]
    shift = [focus_shift(pa[la], pb[la], qa, qb, pairs) for la in range(L)]
    change = np.stack([s["change"] for s in shift])  # [L, H]
    st.caption(
        f"{len(pairs)} shared tokens aligned (of {len(a)} and {len(b)}). Change = total variation distance "
        "between the focus token's two attention rows (weight on tokens only one sentence has counts fully)."
    )
    _layer_head_map(ctx, change, f"How much “{focus}” changes where it looks, per head", "change", "two_change")
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


def rollout_view(ctx: Ctx) -> None:
    if _needs_pretrained(ctx):
        return
    p = _patterns(ctx)
    roll = rollout(p)  # [L, n, n]
    labels = ctx.base.tokens.labels
    L = roll.shape[0]
    upto = st.slider("Up to layer", 0, L - 1, L - 1, key="rollout_layer") if L > 1 else 0
    st.caption(
        "Attention rollout (Abnar & Zuidema 2020): per layer, average the heads, add the residual connection as "
        "an identity (Â = 0.5·A + 0.5·I, rows renormalised), and multiply the layers: rollout = Â_l · … · Â_0. "
        "Row i estimates how much each input token flows into position i by that layer."
    )
    plot(
        matrix_heatmap(
            roll[upto], labels, labels, f"Rollout through layers 0–{upto}", value_name="share", attention=True
        ),
        "rollout",
        ctx.c.image_format,
    )
    downloads("rollout", npz={"tokens": np.asarray(labels, dtype=str), "rollout": roll.astype(np.float32)})


def ablation_view(ctx: Ctx) -> None:
    if _needs_pretrained(ctx, self_attention=False):
        return
    L, H = ctx.base.n_layers, ctx.base.n_heads
    c1, c2 = st.columns(2)
    layers = c1.multiselect("Layers", list(range(L)), default=[0], key="abl_layers")
    heads = c2.multiselect("Heads to zero in those layers", list(range(H)), default=[0], key="abl_heads")
    plan = tuple(((ctx.part, int(la)), tuple(int(h) for h in heads)) for la in layers) if heads else ()
    st.caption(
        f"The whole model runs with these heads ({PART_NAMES[ctx.part]}) zeroed on their way into W^O "
        "(for this run only; the shared weights are untouched)."
    )
    effect = get_ablation(ctx.config, ctx.c.text, ctx.target, plan)
    labels = effect["tokens"]
    if "embedding_cosine" in effect:
        st.metric("Sentence embedding: cosine to the intact model", f"{effect['embedding_cosine']:.4f}")
    else:
        t1, t2 = st.columns(2)
        t1.markdown("**Next token, intact**")
        t1.table({"token": [t for t, _ in effect["top_before"]], "p": [f"{p:.3f}" for _, p in effect["top_before"]]})
        t2.markdown("**Next token, heads ablated**")
        t2.table({"token": [t for t, _ in effect["top_after"]], "p": [f"{p:.3f}" for _, p in effect["top_after"]]})
    plot(
        token_bars(labels, {"|Δ hidden| / |hidden|": effect["token_change"]}, "Last hidden state change per token"),
        "ablation_change",
        ctx.c.image_format,
    )
    rows = [[labels[i], f"{v:.6g}"] for i, v in enumerate(effect["token_change"])]
    downloads("ablation", csv_data=csv_bytes(["token", "relative_change"], rows))

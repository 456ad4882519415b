"""The Variants tab: the model's K/V heads shared (MHA → GQA → MQA, mean-pooled or aligned), what it costs in
output change and what it saves in key/value cache (mha_viz/studies/variants.py)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.plans.variants import (
    MIB,
    better_notes,
    change_note,
    groups_words,
    share_table,
    shown_heads,
)
from mha_viz.figures import line_chart
from mha_viz.figures.variants import energy_figure
from mha_viz.figures.variants_moh import moh_figure, usage_map
from mha_viz.studies import collab, importance, moh, variants
from mha_viz.trace import MhaVizError
from mha_viz.ui.cache import model_of
from mha_viz.ui.cache_variants import (
    get_moh,
    get_patterns,
    get_rank_curve,
    get_spectra,
    get_study,
    get_usage,
)
from mha_viz.ui.common import cached_figure, csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx, needs_pretrained

MOST_CHANGED = 4  # heads shown before and after at first (the most changed; 8 panels, not 24: ~0.3 s less to draw)


PARTS = {"share": "Share keys and values (GQA, MQA)", "collab": "Collaborative heads", "mixture": "Mixture of heads"}


def variants_view(ctx: Ctx) -> None:
    """The variants the articles end with, one part at a time (sub-tabs: only the open part is computed and drawn;
    the three together were ~1.3 s of the browser's time on every visit)."""
    if needs_pretrained(ctx, self_attention=False):
        return
    variants.check_model(model_of(ctx.config))
    tabs = st.tabs(list(PARTS.values()), key="var_part", on_change="rerun")
    for run, tab in zip((_share, _collaborate, _mixture), tabs, strict=True):
        if tab.open:
            with tab:
                run(ctx)


def _share(ctx: Ctx) -> None:
    """GQA / MQA conversion: grouped K/V heads, the patterns before and after, the output change against the cache."""
    lm = model_of(ctx.config)
    kvh, H = lm.n_kv_heads, lm.n_heads
    st.markdown(
        f"**Share keys and values.** This model has {H} query heads and {kvh} key/value heads per layer. Grouped-query "
        "attention (GQA, Ainslie et al. 2023) lets g groups of heads share one key and one value head; multi-query "
        "(MQA) is g = 1. Converted without training: each group's K and V projections (weights and biases) become the "
        "mean of its members' — computed as the mean of their keys and values, which is the same by linearity (and "
        "after rotary embeddings, the same rotation for every head). **Mean-pooled**: consecutive K/V heads form a "
        "group. **Aligned**: heads whose keys and values are most alike on this text are grouped first (equal-size "
        "groups grown from the most similar pair), then pooled — fitted on the text it is measured on. "
        "**Orthogonal** (arXiv 2412.20677): consecutive groups, but each member's keys and values are first rotated "
        "onto the group's first head (orthogonal Procrustes on this text's keys and values); its query heads' "
        "queries turn with its keys and their outputs turn back before W^O, so the rotation alone changes nothing. "
        "Rotary models: one 2×2 rotation per frequency pair (it commutes with rotary, so it folds into W_Q and W_K); "
        "keys after QK-norm are not rotated (only values). Fitted on this text, the rotations (d_head·(d_head−1)/2 "
        "angles per head) can match its few tokens' keys closely, so its curve flatters it: fitted on another text, "
        "the gain over mean-pooling is much smaller (MiniLM, 6 K/V heads: 0.30 mean-pooled, 0.25 orthogonal fitted "
        "elsewhere, 0.04 fitted on the text itself)."
    )
    counts = variants.kv_counts(kvh)
    if len(counts) == 1:
        st.info("This model already has a single key/value head (MQA): there is nothing left to share.")
        return
    config = ctx.config
    args = (config.model_name, config.model_device, ctx.text, ctx.target, ctx.part)
    found = get_study(*args)
    c1, c2 = st.columns(2)
    grouping = c1.radio("Grouping", list(variants.GROUPINGS), format_func=variants.GROUPINGS.get, key="var_grouping",
                        horizontal=True)  # fmt: skip
    g = c2.selectbox("K/V heads per layer (g)", counts[1:], key="var_g", help="every g that divides the model's own")
    point = next(p for p in found.points if (p.grouping, p.kv_heads) == (grouping, g))
    st.markdown(
        f"**{ctx.where}, every layer converted to {g} K/V heads ({grouping}).** Groups of K/V heads here: "
        + groups_words(point.groups[ctx.layer], H, kvh)
    )
    _before_after(ctx, args, point.groups, grouping)
    _whole_model(ctx, found, kvh)


def _before_after(ctx: Ctx, args: tuple, groups: tuple, grouping: str) -> None:
    """The opened layer's heads before and after the conversion (the most changed first), and how much they changed."""
    before = get_patterns(*args, ctx.layer, ())
    after = get_patterns(*args, ctx.layer, groups, grouping)
    dist = variants.head_change(before, after)
    tokens, keys = ctx.base.tokens.labels, ctx.base.key_tokens.labels
    every = len(dist) <= MOST_CHANGED or st.toggle(
        f"Show all {len(dist)} heads", value=False, key="var_every_head",
        help=f"off: the {MOST_CHANGED} heads whose patterns changed most, largest change first",
    )  # fmt: skip
    shown = shown_heads(dist, every, MOST_CHANGED)
    heads = None if shown is None else tuple(map(int, shown))
    fig = cached_figure("variants_before_after", before, after, dist, tuple(tokens), tuple(keys), heads)
    plot(fig, "variants_heads", ctx.image_format)
    st.caption(change_note(dist, every, MOST_CHANGED))


def _whole_model(ctx: Ctx, found: variants.Study, kvh: int) -> None:
    """Every g, the whole model converted: the output change against the KV cache, its table and download."""
    lm = model_of(ctx.config)
    measure = importance.measure_name(lm)
    st.markdown(
        f"**The whole model** (every layer converted) for every g: the output change ({measure}) against the "
        f"key/value cache = **{variants.CACHE_FORMULA}**, here 2 · {found.n_layers} · g · {found.d_head} · tokens · 4."
    )
    long_ctx = st.toggle(f"Cache at {variants.LONG_CONTEXT:,} tokens", value=False, key="var_long",
                         help="off: the cache over this text's tokens")  # fmt: skip
    mib = (lambda p: p.long_cache_bytes / MIB) if long_ctx else (lambda p: p.kv_cache_bytes / MIB)
    curves = {
        variants.GROUPINGS[name]: ([p.kv_heads for p in c], [mib(p) for p in c], [p.change for p in c])
        for name in variants.GROUPINGS
        if (c := found.curve(name))
    }
    own = found.points[0]
    tokens_said = f"{variants.LONG_CONTEXT:,} tokens" if long_ctx else f"this text's {found.tokens:.0f} tokens"
    title = f"Output change against the KV cache ({tokens_said})"
    fig = cached_figure(
        "variants_cache_curve",
        curves,
        (own.kv_heads, mib(own)),
        importance.measure_short(lm),
        title,
        f"KV cache (MiB, {tokens_said})",
    )  # kept finished: a switch back to the tab draws it from the cache
    plot(fig, "variants_curve", ctx.image_format)
    st.dataframe(share_table(found, kvh, variants.LONG_CONTEXT), hide_index=True)
    for note in better_notes(found):
        st.caption(note)
    rows = [[p.grouping, p.kv_heads, f"{p.kv_cache_bytes:.6g}", f"{p.change:.6g}"] for p in found.points]
    downloads("variants", csv_data=csv_bytes(["grouping", "kv_heads", "kv_cache_bytes", "change"], rows))


def _collaborate(ctx: Ctx) -> None:
    """Cordonnier et al. 2020 on this model: how many dimensions the heads' query and key projections need together."""
    st.markdown(
        "**Collaborate instead of concatenate** (Cordonnier et al. 2020). Each head projects the layer's input to "
        "its own d_head-dimensional queries and keys; side by side, W_Q = [W_Q¹ … W_Qʰ] is [d_model × h · d_head]. "
        "If the heads used independent directions, the concatenation would need all its dimensions; the article "
        "found that trained heads need about a third (they share a query/key space, which one shared projection "
        "with per-head mixing can hold). Below: the share of the energy Σσ² kept by the leading singular values "
        "(rotary models: the projections before the rotation)."
    )
    try:
        found = get_spectra(ctx.config.model_name, ctx.config.model_device, ctx.part)
    except MhaVizError as exc:
        st.info(f"Not for this model: {exc}")
        return
    lay = found[ctx.layer]
    d_head = lay.head_q.shape[1]
    curves = {
        f"all heads' W_Q ({lay.width_q} wide)": collab.energy_curve(lay.q),
        f"all K/V heads' W_K ({lay.width_k} wide)": collab.energy_curve(lay.k),
        f"one head's W_Q ({d_head} wide, mean of {lay.head_q.shape[0]})": np.mean(
            [collab.energy_curve(sv) for sv in lay.head_q], axis=0
        ),
    }
    plot(energy_figure(curves, f"{ctx.where}: energy kept against dimensions kept"), "collab_energy",
         ctx.image_format)  # fmt: skip
    shares = [f"{s:.0%}" for s in collab.SHARES]
    table = [
        {"layer": s.layer,
         **{f"W_Q {p}": f"{d} of {s.width_q} ({d / s.width_q:.0%})" for p, d in zip(shares, s.dims_q, strict=True)},
         **{f"W_K {p}": f"{d} of {s.width_k} ({d / s.width_k:.0%})" for p, d in zip(shares, s.dims_k, strict=True)},
         f"one head 95% (of {d_head})": f"{s.one_head[1]:.1f}"}
        for s in found
    ]  # fmt: skip
    st.dataframe(table, hide_index=True)
    q95 = np.array([s.dims_q[1] / s.width_q for s in found])
    st.caption(
        f"95 % of the concatenated queries' energy: {q95.min():.0%} to {q95.max():.0%} of the dimensions across the "
        f"layers (median {np.median(q95):.0%}); the article: about one third."
    )
    lm = model_of(ctx.config)
    if not lm.site(ctx.part, ctx.layer).qkv:
        st.caption("The shared-basis what-if needs plain query and key projections; this layer rotates or norms them.")
        return
    args = (ctx.config.model_name, ctx.config.model_device, ctx.text, ctx.target, ctx.part, ctx.layer)
    curve = get_rank_curve(*args)
    st.markdown(
        f"**What-if, {ctx.where} alone:** every head's queries and keys projected onto a shared rank-r basis (the "
        "top-r right singular vectors of the concatenated W_Q, and of W_K): q ← (q − b_Q) V_r V_rᵀ + b_Q. The output "
        f"change ({importance.measure_name(lm)}) and how far the layer's patterns move, against r."
    )
    xs = [f"{r} ({f:.0%})" for r, f in zip(curve.ranks_q, curve.fractions, strict=True)]
    series = {importance.measure_short(lm): curve.change, "mean JS distance of the layer's patterns": curve.distance}
    plot(line_chart(xs, series, "Shared query/key basis of rank r", "r of W_Q's width"), "collab_rank",
         ctx.image_format)  # fmt: skip


def _mixture(ctx: Ctx) -> None:
    """Training-free mixture of heads (Jin et al. 2024): per token, only the k heads that contribute most."""
    lm = model_of(ctx.config)
    H = lm.n_heads
    st.markdown(
        "**Mixture of heads** (MoH, Jin et al. 2024, arXiv 2410.11842). MoH treats heads as experts: a trained router "
        "activates the top-k heads per token. Here, without training, the router's stand-in is **the heads' own "
        f"contribution: {moh.ROUTER}**; the other heads are zeroed for that token on their way into W^O, in every "
        "layer at once (each layer routed on its inputs in the routed pass), and the kept heads are summed unweighted."
    )
    k = st.slider("Heads kept per token (k)", 0, H, max(1, H // 2), key="moh_k")
    usage = get_usage(ctx.config.model_name, ctx.config.model_device, ctx.text, ctx.target, ctx.part, k)
    layer = usage[ctx.layer]  # [q, h]
    tokens = ctx.base.tokens.labels
    plot(usage_map(layer, tokens, f"{ctx.where}: heads each token keeps (k = {k} of {H}; blue = kept)"),
         "moh_usage", ctx.image_format)  # fmt: skip
    share = layer.mean(0)
    st.caption(
        f"Share of tokens that keep each head here: most {int(share.argmax())} ({share.max():.0%}), least "
        f"{int(share.argmin())} ({share.min():.0%}). Heads no token keeps: "
        f"{', '.join(str(int(h)) for h in np.flatnonzero(share == 0)) or 'none'}."
    )
    n_runs = lm.n_layers(ctx.part) * H + 2 * (H + 1)
    if not st.toggle(f"Compute routed against static pruning for every k (about {n_runs} model runs)", key="moh_run"):
        return
    c = get_moh(ctx.config, ctx.text, ctx.target, ctx.part)
    plot(moh_figure(c.ks, c.routed, c.static, importance.measure_short(lm), c.n_layers), "moh_curve",
         ctx.image_format)  # fmt: skip
    wins = [int(k) for k, r, s in zip(c.ks[1:-1], c.routed[1:-1], c.static[1:-1], strict=True) if r < s]
    st.caption(
        f"Static = the same average number of heads per layer removed for every token: {c.n_layers} · (h − k) heads "
        "in Head importance's pruning order (smallest |importance| first). Routing per token changes the output less "
        f"at k = {', '.join(map(str, wins)) or 'no k'} (of 1 … {H - 1}) on this text."
    )
    downloads("moh", csv_data=csv_bytes(["k", "change_routed", "change_static"],
                                        [[int(k), f"{r:.6g}", f"{s:.6g}"] for k, r, s in
                                         zip(c.ks, c.routed, c.static, strict=True)]))  # fmt: skip

"""Views that look at a layer as the model computes it: Heads, Compare heads, Overview."""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass

import numpy as np
import streamlit as st

from mha_viz.analysis import head_distances, head_roles, head_stats, is_punctuation, similarity_order
from mha_viz.config import PART_NAMES, Config
from mha_viz.figures import GRID_MAX_CELLS, head_bars, matrix_heatmap, overview
from mha_viz.trace import AttentionTrace
from mha_viz.ui.cache import Base, get_all_patterns, get_trace
from mha_viz.ui.common import Shown, cached_figure, csv_bytes, downloads, head_names, plot, shown, trace_shown
from mha_viz.ui.sidebar import Controls


@dataclass(frozen=True)
class Ctx:
    """Everything a view needs: the controls, the chosen attention kind and layer, and what they hold."""

    c: Controls
    layer: int
    part: str
    target: str | None
    base: Base

    @property
    def config(self) -> Config:
        return self.c.config

    @property
    def special(self) -> tuple[bool, ...]:
        return self.base.tokens.special

    @property
    def key_special(self) -> tuple[bool, ...]:
        return self.base.key_tokens.special

    @property
    def where(self) -> str:
        """ "layer 3" (with the attention kind for encoder-decoder models)."""
        kind = f"{PART_NAMES[self.part]}, " if len(self.base.parts) > 1 else ""
        return f"{kind}layer {self.layer}"

    def trace(self, layer: int | None = None, **edits) -> AttentionTrace:
        """The layer's trace (this layer by default) with the sidebar's settings plus ``edits``."""
        config = dataclasses.replace(self.config, **edits) if edits else self.config
        return get_trace(config, self.c.text, self.target, self.part, self.layer if layer is None else layer)

    def shown(self, trace: AttentionTrace) -> Shown:
        return trace_shown(trace, self.special, self.c.hide_special, self.key_special)

    def patterns(self, text: str | None = None) -> np.ndarray:
        """Every layer's pattern for ``text`` (the sidebar's by default). Shapes: [L, H, n_q, n_k]."""
        return get_all_patterns(self.config, text or self.c.text, self.target, self.part)


def _valid_choice(key: str, options: list, default) -> None:
    """Reset a keyed widget's stored value when it is not among the current options (a value not yet
    stored, e.g. one the URL will give the widget, is left alone)."""
    if key in st.session_state:
        if st.session_state[key] not in options:
            st.session_state[key] = default
    elif key not in st.query_params:
        st.session_state[key] = default


def clicked_points(chart_key: str) -> list[tuple[dict, list]]:
    """The points of a chart's selection event, each with its customdata as a plain list.

    Typed-array customdata arrives from the browser as {"0": a, "1": b}; lists stay lists.
    """
    sel = st.session_state.get(chart_key)
    points = getattr(getattr(sel, "selection", None), "points", None) or []
    out = []
    for p in points:
        custom = p.get("customdata")
        if isinstance(custom, dict):
            custom = [custom[k] for k in sorted(custom, key=lambda k: int(k))]
        out.append((p, list(custom) if isinstance(custom, list | tuple) else []))
    return out


def _on_grid_click() -> None:
    for p, custom in clicked_points("heads_grid"):  # customdata (weight, head); y is the query token
        if len(custom) == 2:
            st.session_state["head"] = int(custom[1])
            st.session_state["focus"] = html.unescape(str(p.get("y", "")))
            return


def heads_view(ctx: Ctx) -> None:
    t = ctx.trace()
    sh = ctx.shown(t)
    h, n = sh.pattern.shape[0], len(sh.labels)
    keys = "" if t.part != "cross" else f" (queries: the decoder's {n} tokens; keys: the source's {len(sh.key_labels)})"
    st.caption(
        f"{ctx.base.model_name}, {ctx.where}: {h} heads, d_k = {t.q.shape[-1]}, {n} tokens{keys}. "
        "Rows are query tokens, columns the key tokens they attend to; each row sums to 1. "
        "Click a cell to open its head below (and make its query the focus token)."
    )
    _model_terms(t)
    if t.group > 1:
        kv = t.n_heads // t.group
        shares = "; ".join(f"K/V {g}: heads {g * t.group}–{(g + 1) * t.group - 1}" for g in range(kv))
        st.caption(f"Grouped-query attention: {kv} key/value heads shared by the {h} query heads ({shares}).")
    if sh.note:
        st.info(sh.note)
    if n > GRID_MAX_CELLS:
        f = -(-n // GRID_MAX_CELLS)
        st.caption(
            f"{n} tokens: the grid shows each head averaged over {f}×{f} token blocks (hover says “mean”); "
            "the head opened below shows every weight."
        )
    titles = head_names(h)
    if (
        not ctx.c.hide_special and t.part != "cross"
    ):  # role labels from this layer's own pattern (thresholds in Head roles)
        pieces = ctx.base.tokens.pieces
        roles = head_roles(
            t.pattern.numpy(),
            np.asarray(ctx.special),
            np.asarray([is_punctuation(p) for p in pieces]),
            [p for p, s in zip(pieces, ctx.special, strict=True) if s],
        )
        titles = [f"head {i} · {label}" for i, label in enumerate(roles["label"])]
    fig = cached_figure("heads_grid", sh.pattern, tuple(sh.labels), tuple(titles), 4, True, tuple(sh.key_labels))
    plot(fig, "heads_grid", ctx.c.image_format, on_select=_on_grid_click)

    _head_and_focus(ctx, sh)


@st.fragment
def _head_and_focus(ctx: Ctx, sh: Shown) -> None:
    """The opened head and the focus token: a fragment, so changing them redraws only this part."""
    h, n = sh.pattern.shape[0], len(sh.labels)
    left, right = st.columns(2)
    _valid_choice("head", list(range(h)), 0)
    head = int(
        left.selectbox("Open head", list(range(h)), format_func=lambda i: f"head {i}", key="head", bind="query-params")
    )
    default_focus = "it" if "it" in sh.labels else sh.labels[min(1, n - 1)]
    _valid_choice("focus", list(sh.labels), default_focus)
    focus = right.selectbox("Focus token (query)", list(sh.labels), key="focus", bind="query-params")
    q = list(sh.labels).index(focus)
    with left:
        title = f"Layer {ctx.layer}, head {head}: attention weights [{n} × {n}]"
        title = f"{ctx.where.capitalize()}, head {head}: attention weights [{n} × {len(sh.key_labels)}]"
        fig = matrix_heatmap(sh.pattern[head], sh.key_labels, sh.labels, title, value_name="weight", attention=True)
        plot(fig, "head_large", ctx.c.image_format)
    with right:
        strip = sh.pattern[:, q, :]  # [h, keys]: the focus token's row in every head
        title = f"“{focus}” as the query: its weights in every head [{h} × {len(sh.key_labels)}]"
        fig = matrix_heatmap(strip, sh.key_labels, head_names(h), title, value_name="weight")
        plot(fig, "focus_strip", ctx.c.image_format)
    bars = cached_figure("focus_bars", sh.pattern, tuple(sh.key_labels), q, 4, focus)
    plot(bars, "focus_bars", ctx.c.image_format)
    rows = [[f"head {i}", *(f"{v:.6g}" for v in sh.pattern[i, q])] for i in range(h)]
    downloads(
        "heads",
        npz={
            "tokens": np.asarray(sh.labels, dtype=str),
            "key_tokens": np.asarray(sh.key_labels, dtype=str),
            "pattern": sh.pattern,
        },
        csv_data=csv_bytes([f"{focus} → key", *sh.key_labels], rows),
    )


def _model_terms(t: AttentionTrace) -> None:
    """Say which terms beyond q·kᵀ·scale the model adds here, and that the weights are the model's own."""
    terms = []
    if t.softcap is not None:
        terms.append(f"logit soft-capping at {t.softcap:g}")
    if t.bias is not None:
        terms.append("an additive position bias")
    if t.causal:
        terms.append("a causal mask")
    extra = f"This layer adds {', '.join(terms)} before the softmax." if terms else ""
    if t.model_delta is not None:
        extra = (
            f"Recomputed from the q, k, v the model used; largest difference from the model's own weights: "
            f"{t.model_delta:.1e}. {extra}"
        )
    if extra:
        st.caption(extra)


def compare_view(ctx: Ctx) -> None:
    layers = list(range(ctx.base.n_layers))
    h = ctx.trace().n_heads
    cols = st.columns(4)
    picks = []
    for j, side in enumerate("ab"):
        _valid_choice(f"{side}_layer", layers, ctx.layer)
        _valid_choice(f"{side}_head", list(range(h)), min(j, h - 1))
        la = cols[2 * j].selectbox(f"Layer {side.upper()}", layers, key=f"{side}_layer", bind="query-params")
        he = cols[2 * j + 1].selectbox(f"Head {side.upper()}", list(range(h)), key=f"{side}_head", bind="query-params")
        picks.append((int(la), int(he)))
    shows = [ctx.shown(ctx.trace(la)) for la, _ in picks]
    labels, keys = shows[0].labels, shows[0].key_labels
    (la_a, he_a), (la_b, he_b) = picks
    pa, pb = shows[0].pattern[he_a], shows[1].pattern[he_b]
    c1, c2, c3 = st.columns(3)
    n = len(labels)
    for col, (la, he), p, key in ((c1, picks[0], pa, "cmp_a"), (c2, picks[1], pb, "cmp_b")):
        with col:
            plot(
                matrix_heatmap(
                    p, keys, labels, f"Layer {la}, head {he} [{n} × {len(keys)}]", value_name="weight", attention=True
                ),
                key,
                ctx.c.image_format,
            )
    with c3:
        title = f"Difference: (L{la_b} H{he_b}) − (L{la_a} H{he_a})"
        plot(
            matrix_heatmap(pb - pa, keys, labels, title, diverging=True, value_name="Δ weight"),
            "cmp_diff",
            ctx.c.image_format,
        )

    sh = ctx.shown(ctx.trace())
    dist = head_distances(sh.pattern)
    order = similarity_order(dist)
    names = head_names(sh.pattern.shape[0])
    ordered = [names[i] for i in order]
    d1, d2 = st.columns(2)
    with d1:
        plot(
            matrix_heatmap(
                dist[np.ix_(order, order)],
                ordered,
                ordered,
                f"Layer {ctx.layer}: Jensen–Shannon distance between heads (similar heads sit together)",
                value_name="JS distance",
            ),
            "similarity",
            ctx.c.image_format,
        )
    stats = head_stats(sh.pattern)
    with d2:
        fig = head_bars(
            {"entropy (nats)": stats["entropy"], "attention to self": stats["self"]},
            names,
            f"Layer {ctx.layer}: broad (high entropy) vs focused heads; weight on the diagonal",
        )
        plot(fig, "head_stats", ctx.c.image_format)
    st.caption(
        "Entropy: mean over query rows of −Σ p log p (ln n = uniform). Attention to self: mean weight on the "
        "diagonal. Distance: Jensen–Shannon distance (base 2) between the two heads' rows, averaged over rows."
    )
    rows = [
        [names[i], f"{stats['entropy'][i]:.6g}", f"{stats['max_weight'][i]:.6g}", f"{stats['self'][i]:.6g}"]
        for i in range(len(names))
    ]
    downloads(
        "compare",
        npz={"js_distance": dist.astype(np.float32), "order": np.asarray(order)},
        csv_data=csv_bytes(["head", "entropy_nats", "mean_max_weight", "self"], rows),
    )


def _on_tile_click() -> None:
    for _, custom in clicked_points("overview_fig"):  # customdata (layer, head)
        if len(custom) == 2:
            st.session_state["layer"] = int(custom[0])
            st.session_state["head"] = int(custom[1])
            st.session_state["view"] = "Heads"
            return


def overview_view(ctx: Ctx) -> None:
    patterns = ctx.patterns()  # [L, H, n_q, n_k]
    L, H, n, nk = patterns.shape
    b = ctx.base
    sh = shown(patterns.reshape(L * H, n, nk), b.tokens.labels, ctx.special, ctx.c.hide_special,
               b.key_tokens.labels, ctx.key_special)  # fmt: skip
    m, mk = len(sh.labels), len(sh.key_labels)
    st.caption(
        f"{ctx.base.model_name}: every layer (rows) × head (columns), {m} tokens each. Click a tile to "
        "open that head in the Heads view."
    )
    if sh.note:
        st.info(sh.note)
    plot(overview(sh.pattern.reshape(L, H, m, mk)), "overview_fig", ctx.c.image_format, on_select=_on_tile_click)
    downloads(
        "overview",
        npz={
            "tokens": np.asarray(sh.labels, dtype=str),
            "key_tokens": np.asarray(sh.key_labels, dtype=str),
            "pattern": sh.pattern.reshape(L, H, m, mk),
        },
    )

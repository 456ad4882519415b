"""The Compare heads tab: two heads side by side, their difference, and how the layer's heads relate."""

from __future__ import annotations

import numpy as np
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from mha_viz.analysis.patterns import head_distances, head_stats, similarity_order
from mha_viz.analysis.plans.compare import compare_plan, second_head
from mha_viz.config import WINDOW_FROM, WINDOW_ROWS
from mha_viz.figures import head_bars, matrix_heatmap
from mha_viz.figures.heatmap import HALF_ROW_TITLE_CHARS as TITLE_CHARS
from mha_viz.ui.choices import valid_choice
from mha_viz.ui.common import cached_figure, csv_bytes, downloads, head_names, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.opened import follow_head
from mha_viz.ui.window import row_window


@sized_cache(max_entries=16, max_mb=1)
def head_summary(pattern: np.ndarray) -> tuple[np.ndarray, list[int], dict[str, np.ndarray]]:
    """Every pair of heads' Jensen–Shannon distance, an order that seats similar heads together, and each head's
    entropy, largest weight and weight on itself, computed once per layer (they read all [h, n, n] weights).
    Shapes: pattern [h, n, n] -> ([h, h], h indices, each stat [h])."""
    dist = head_distances(pattern)
    return dist, similarity_order(dist), head_stats(pattern)


def compare_view(ctx: Ctx) -> None:
    h = ctx.trace(x=False).n_heads
    picks = _pickers(ctx, h)
    shows = [ctx.shown(ctx.trace(la, x=False)) for la, _ in picks]
    labels, keys = shows[0].labels, shows[0].key_labels
    (_, he_a), (_, he_b) = picks
    pa, pb = shows[0].pattern[he_a], shows[1].pattern[he_b]
    n = len(labels)
    rows = (
        row_window(n, WINDOW_ROWS, "cmp_rows", "each of A, B and their difference") if n > WINDOW_FROM else slice(0, n)
    )
    plan = compare_plan(pa, pb, (picks[0], picks[1]), rows, len(keys))
    for col, p, title, key in zip(st.columns(2), (pa, pb), plan.titles, ("cmp_a", "cmp_b"), strict=True):
        with col:
            fig = cached_figure("matrix_heatmap", p[rows], keys, labels[rows], title, value_name="weight",
                                attention=True, zmin=0.0, zmax=plan.top, title_chars=TITLE_CHARS)  # fmt: skip
            plot(fig, key, ctx.image_format)
    st.caption(plan.scale_note)
    d1, d2 = st.columns(2)
    with d1:
        fig = cached_figure("matrix_heatmap", pb[rows] - pa[rows], keys, labels[rows], plan.diff_title, diverging=True,
                            value_name="Δ weight", title_chars=TITLE_CHARS)  # fmt: skip
        plot(fig, "cmp_diff", ctx.image_format)
    _layer_heads(ctx, d2)


def _pickers(ctx: Ctx, h: int) -> list[tuple[int, int]]:
    """Layer and head of A (the opened ones; a choice opens it) and of B."""
    layers = list(range(ctx.base.n_layers))
    cols = st.columns(4)
    picks = []
    took = follow_head(ctx, "a_head", h, layer_key="a_layer")  # A: the opened layer and head (a choice opens it)
    valid_choice("b_layer", layers, ctx.layer)
    valid_choice("b_head", list(range(h)), second_head(st.session_state.get("a_head"), h))
    for j, side in enumerate("ab"):
        on_change = took if side == "a" else None
        la = cols[2 * j].selectbox(f"Layer {side.upper()}", layers, key=f"{side}_layer", bind="query-params",
                                   on_change=on_change)  # fmt: skip
        he = cols[2 * j + 1].selectbox(f"Head {side.upper()}", list(range(h)), key=f"{side}_head", bind="query-params",
                                       on_change=on_change)  # fmt: skip
        picks.append((int(la), int(he)))
    return picks


def _layer_heads(ctx: Ctx, d2: DeltaGenerator) -> None:
    """How the layer's heads relate: their distances (in ``d2``), entropy and weight on self, and the downloads."""
    sh = ctx.shown(ctx.trace(x=False))
    dist, order, stats = head_summary(sh.pattern)
    names = head_names(sh.pattern.shape[0])
    ordered = [names[i] for i in order]
    with d2:
        plot(
            matrix_heatmap(
                dist[np.ix_(order, order)],
                ordered,
                ordered,
                f"Layer {ctx.layer}: Jensen–Shannon distance between heads (similar heads sit together)",
                value_name="JS distance",
                title_chars=TITLE_CHARS,  # drawn half a row wide: the title breaks into lines, never cut
            ),
            "similarity",
            ctx.image_format,
        )
    fig = head_bars(
        {"entropy (nats)": stats["entropy"], "attention to self": stats["self"]},
        names,
        f"Layer {ctx.layer}: broad (high entropy) vs focused heads; weight on the diagonal",
    )
    plot(fig, "head_stats", ctx.image_format)
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

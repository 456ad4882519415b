"""The Overview tab: every layer × head at a glance; a click opens that head in the Heads tab."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.plans.long_views import LONG_VIEW_FROM, is_long, tile_caption
from mha_viz.figures import GRID_MAX_CELLS, overview
from mha_viz.figures.common import OVERVIEW_TILE, plural
from mha_viz.figures.zoom import CAP_PERCENTILE
from mha_viz.ui.cache_rows import get_pooled_patterns, pooling_progress
from mha_viz.ui.choices import clicked_points
from mha_viz.ui.common import downloads, plot, shown
from mha_viz.ui.context import Ctx
from mha_viz.ui.opened import open_head

TILE = OVERVIEW_TILE  # cells per tile side: longer texts are block-averaged as computed


def _on_tile_click() -> None:
    for _, custom in clicked_points("overview_fig"):  # customdata (layer, head)
        if len(custom) == 2:
            open_head(int(custom[0]), int(custom[1]))
            return


def _kept(ctx: Ctx) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """The query rows and key columns "hide special tokens" keeps (None: all), as ui.common.shown decides."""
    sp, ksp = np.asarray(ctx.hidden, dtype=bool), np.asarray(ctx.key_hidden, dtype=bool)
    if not ctx.hide_special or not (sp.any() or ksp.any()) or sp.all() or ksp.all():
        return None, None
    return tuple(np.flatnonzero(~sp).tolist()), tuple(np.flatnonzero(~ksp).tolist())


def _pooled(ctx: Ctx, keep: tuple[int, ...] | None, keep_k: tuple[int, ...] | None) -> tuple[np.ndarray, int]:
    """Every layer's pooled map; at length with a progress bar (each layer's map is computed on demand from its q, k
    and row statistics: seconds a layer on a CPU at 8,192 tokens). Shapes: ([L, H, m_q, m_k], f)."""
    if not is_long(len(ctx.base.tokens.labels), len(ctx.base.key_tokens.labels)):
        return get_pooled_patterns(ctx.sel, TILE, ctx.measure, keep, keep_k)
    bar = st.progress(0.0, text="Pooling every layer's exact weights (from q, k and each row's softmax statistics)")

    def told(done: int, total: int) -> None:
        bar.progress(done / total, text=f"Pooling every layer's exact weights: layer {done} of {total}")

    with pooling_progress(told):
        out = get_pooled_patterns(ctx.sel, TILE, ctx.measure, keep, keep_k)
    bar.empty()
    return out


def overview_view(ctx: Ctx) -> None:
    b = ctx.base
    keep, keep_k = _kept(ctx)
    tiles, f = _pooled(ctx, keep, keep_k)
    ctx.measure_note()
    L, H = tiles.shape[:2]
    m = len(b.tokens.labels) if keep is None else len(keep)
    st.caption(
        f"{ctx.base.model_name}: every layer (rows) × head (columns), {plural(m, 'token')} each. Click a tile to "
        "open that head in the Heads view."
    )
    if keep is not None:
        st.info("Special tokens hidden: each row is renormalised to sum to 1 over the remaining tokens.")
    if f > 1:
        long = is_long(m, m if keep_k is None else len(keep_k))
        st.caption(
            f"A pooled exact map: {tile_caption(f, ctx.value_name)} (the means of the model's own weights, computed "
            "layer by layer"
            + (f"; over {LONG_VIEW_FROM:,} tokens from its q, k and each row's softmax statistics). Open a head "
               "in the Heads view to zoom into its exact weights." if long else "); the Heads view shows every weight.")
        )  # fmt: skip
    group = max(1, b.n_heads // max(1, b.n_kv_heads))
    if group > 1:
        st.caption(f"Grouped-query attention: columns labelled kv0, kv1, … share one key/value head ({group} each).")
    at_length = is_long(m, m if keep_k is None else len(keep_k))
    fig = overview(tiles, tile=TILE, group=group, pooled=f, cap=CAP_PERCENTILE if at_length else None)
    plot(fig, "overview_fig", ctx.image_format, on_select=_on_tile_click)
    if m <= GRID_MAX_CELLS:  # every weight (small)
        patterns = ctx.patterns(follow_measure=True)  # [L, H, n_q, n_k]
        nq, nk = patterns.shape[-2:]
        sh = shown(patterns.reshape(L * H, nq, nk), b.tokens.labels, ctx.hidden, ctx.hide_special,
                   b.key_tokens.labels, ctx.key_hidden)  # fmt: skip
        arrays = {"pattern": sh.pattern.reshape(L, H, len(sh.labels), len(sh.key_labels))}
        labels, key_labels = sh.labels, sh.key_labels
    else:  # the tiles as drawn
        st.caption(f"{m} tokens: the download holds the tiles as drawn ({f}×{f} block means), not every weight.")
        arrays = {"tiles": tiles, "block": np.asarray(f)}
        labels = [b.tokens.labels[i] for i in (keep or range(len(b.tokens.labels)))]
        key_labels = [b.key_tokens.labels[i] for i in (keep_k or range(len(b.key_tokens.labels)))]
    downloads(
        "overview",
        npz={"tokens": np.asarray(labels, dtype=str), "key_tokens": np.asarray(key_labels, dtype=str), **arrays},
    )

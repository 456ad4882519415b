"""The Variants tab's caches (ui/views/variants.py re-exports them): the K/V-sharing study and one layer's patterns
converted, the query/key spectra and the shared-basis curve (collaborative heads), and the mixture of heads' usage and
curve. Plain values in, what the study returns out; a long study shows a progress bar while it runs."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.config import Config
from mha_viz.studies import collab, moh, variants
from mha_viz.ui.cache import model_of
from mha_viz.ui.memo import sized_cache


@sized_cache(max_entries=16, max_mb=8)
def get_study(model_name: str, device: str, text: str, target: str | None, part: str) -> variants.Study:
    """Every (grouping, kv_heads) conversion of the whole model on the text (variants.study)."""
    from mha_viz.ui.cache import get_model

    bar = st.progress(0.0, text="Converting…")
    try:
        return variants.study(get_model(model_name, device), [text], part, target,
                              progress=lambda f, what: bar.progress(min(max(f, 0.0), 1.0), text=what))  # fmt: skip
    finally:
        bar.empty()


@sized_cache(max_entries=16, max_mb=64)
def get_patterns(
    model_name: str,
    device: str,
    text: str,
    target: str | None,
    part: str,
    layer: int,
    share: tuple,
    grouping: str = "mean",
) -> np.ndarray:
    """One layer's pattern with every layer converted as ``share`` says (empty: the model). Shapes: [h, q, k]."""
    from mha_viz.ui.cache import get_model

    lm = get_model(model_name, device)
    if not share:
        return variants.layer_patterns(lm, text, target, part, layer)
    return variants.converted_patterns(lm, text, target, part, layer, grouping, share)  # fmt: skip


@sized_cache(max_entries=8, max_mb=16)
def get_spectra(model_name: str, device: str, part: str) -> list[collab.LayerSpectrum]:
    """Every layer's spectra of the concatenated query and key projections (weights only)."""
    from mha_viz.ui.cache import get_model

    return collab.spectra(get_model(model_name, device), part)


@sized_cache(max_entries=8, max_mb=64)
def get_rank_curve(
    model_name: str, device: str, text: str, target: str | None, part: str, layer: int
) -> collab.RankCurve:
    """The shared-basis what-if for one layer (collab.rank_curve)."""
    from mha_viz.ui.cache import get_model

    return collab.rank_curve(get_model(model_name, device), text, target, part, layer)


@sized_cache(max_entries=16, max_mb=16)
def get_usage(model_name: str, device: str, text: str, target: str | None, part: str, k: int) -> np.ndarray:
    """Which heads each token keeps in every layer with top-k routing (moh.head_usage). Shapes: [L, q, h] bool."""
    from mha_viz.ui.cache import get_model

    return moh.head_usage(get_model(model_name, device), text, target, part, k)


@sized_cache(max_entries=8, max_mb=4)
def get_moh(config: Config, text: str, target: str | None, part: str) -> moh.MohCurve:
    """Routed against static pruning for every k (moh.moh_curve), the importance from the shared cache."""
    from mha_viz.ui.cache_studies import get_importance

    bar = st.progress(0.0, text="Head importance…")

    def progress(f: float, what: str) -> None:
        bar.progress(min(max(f, 0.0), 1.0), text=what)

    try:
        imp = get_importance(config, (text,), target, part, lambda f, what: progress(f / 2, what))
        return moh.moh_curve(model_of(config), [text], part, target, importance=imp, progress=progress)
    finally:
        bar.empty()

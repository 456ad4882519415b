"""The Head importance tab: each head's effect on the model's output when removed, and the pruning curve."""

from __future__ import annotations

import hashlib

import numpy as np
import streamlit as st

from mha_viz.config import AUTO_SCAN_TOKENS
from mha_viz.figures import pruning_figure
from mha_viz.studies import importance
from mha_viz.ui.cache import model_of
from mha_viz.ui.cache_studies import get_curve, get_importance, has_importance
from mha_viz.ui.choices import clicked_points
from mha_viz.ui.common import csv_bytes, downloads, layer_head_map, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.links import check_choice
from mha_viz.ui.opened import open_head
from mha_viz.ui.sidebar import EXAMPLES

AUTO_HEADS = 100  # scans of models with at most this many heads start by themselves (MiniLM: 72, ~0.5 s) ...
TEXT_SETS = {"this text": "this text", "set": "this text and the example sentences"}


def _open_head() -> None:
    for _, custom in clicked_points("imp_map"):  # customdata (layer, head, value)
        if len(custom) >= 2:
            open_head(int(custom[0]), int(custom[1]))
            return


def _texts(ctx: Ctx) -> tuple[str, ...]:
    check_choice("imp_texts", list(TEXT_SETS.values()), TEXT_SETS["this text"])
    choice = st.radio(
        "Measured on", list(TEXT_SETS), format_func=TEXT_SETS.get, key="imp_texts", bind="query-params",
        horizontal=True,
    )  # fmt: skip
    if choice == "this text":
        return (ctx.c.text,)
    return (ctx.c.text, *(t for t in EXAMPLES if t not in (ctx.c.text, "humpty dumpty sat on")))


def _progress() -> tuple[object, importance.Progress]:
    bar = st.progress(0.0, text="Starting…")
    return bar, lambda f, what: bar.progress(min(max(f, 0.0), 1.0), text=what)


def _key(prefix: str, args: tuple) -> str:
    """A session key for one scan's "started" flag (model, texts, part)."""
    config, texts, target, part = args
    digest = hashlib.blake2b(repr((config.model_name, texts, target, part)).encode(), digest_size=8).hexdigest()
    return f"{prefix}_{digest}"


def _run_button(key: str, label: str) -> bool:
    """A scan that starts on a click and keeps its result; the Cancel button (any rerun) stops it."""
    if st.session_state.get(key):
        return True
    if st.button(label, key=f"{key}_start"):
        st.session_state[key] = True
        return True
    return False


def _cancel_button(key: str) -> None:
    """Any click reruns the script, which stops the scan; this one also forgets that it was started."""
    if st.session_state.get(key):
        st.button("Cancel", key=f"{key}_cancel", on_click=lambda: st.session_state.pop(key, None),
                  help="Stops the computation; nothing is kept.")  # fmt: skip


def importance_view(ctx: Ctx) -> None:
    lm = model_of(ctx.config)
    L, H = ctx.base.n_layers, ctx.base.n_heads
    n = L * H
    measure = importance.measure_name(lm)
    st.markdown(
        f"**Importance of a head** = how much the model's output changes when that head alone is removed (its "
        f"slice of the attention output zeroed on its way into W^O, as in the Ablation tab). Output measure: "
        f"**{measure}**. After Michel et al. 2019, *Are Sixteen Heads Really Better than One?*"
    )
    texts = _texts(ctx)
    args = (ctx.config, texts, ctx.target, ctx.part)
    done = has_importance("importance", *args)
    tokens = len(ctx.base.tokens.ids)
    auto = n * len(texts) <= AUTO_HEADS and tokens <= AUTO_SCAN_TOKENS
    if not done and not auto and not _run_button(_key("imp_go", args), f"Scan all {n} heads"):
        st.caption(
            f"{n} heads × {len(texts)} text(s), {tokens} tokens: one forward pass of the whole model each. "
            "Press the button to start (it shows its progress and can be cancelled)."
        )
        return
    if not done:
        bar, progress = _progress()
        _cancel_button(_key("imp_go", args))
        imp = get_importance(*args, progress)
        bar.empty()
    else:
        imp = get_importance(*args)
    title = f"Importance of each head ({measure}); click a cell to open the head"
    layer_head_map(imp.astype(np.float32), title, "importance", "imp_map", ctx.c.image_format, on_select=_open_head)
    order = importance.pruning_order(imp)
    top = order[::-1][:5]
    st.markdown("Most important: " + ", ".join(f"layer {la} head {h} ({imp[la, h]:.4g})" for la, h in top))
    rows = [[la, h, f"{imp[la, h]:.6g}"] for la in range(L) for h in range(H)]
    downloads("importance", csv_data=csv_bytes(["layer", "head", "importance"], rows))

    st.markdown(
        "**Pruning curve.** Heads are removed one after another, least important first in a fixed order (smallest "
        "|importance| above first, not recomputed after each removal), against random orders "
        f"({len(importance.RANDOM_SEEDS)} seeds: their mean and range)."
    )
    if not has_importance("curve", *args) and not _run_button(_key("curve_go", args), "Compute the pruning curve"):
        return
    bar, progress = _progress()
    _cancel_button(_key("curve_go", args))
    curve = get_curve(*args, progress)
    bar.empty()
    steps = curve["steps"]
    share = steps / n
    short = importance.measure_short(lm)
    fig = pruning_figure(share, curve["by_importance"], curve["random"], short, f"{measure} as heads are removed")
    plot(fig, "pruning", ctx.c.image_format)
    half = int(np.argmin(np.abs(share - 0.5)))
    st.caption(
        f"With {steps[half]} of {n} heads removed: {curve['by_importance'][half]:.4g} least-important-first, "
        f"{curve['random'][:, half].mean():.4g} in random order. All heads removed: {curve['by_importance'][-1]:.4g}. "
        "The heads that survive longest (removed last): " + ", ".join(f"L{la} H{h}" for la, h in order[::-1][:10]) + "."
    )
    rows = [
        [int(k), f"{k / n:.6g}", f"{curve['by_importance'][i]:.6g}", *(f"{v:.6g}" for v in (
            curve["random"][:, i].mean(), curve["random"][:, i].min(), curve["random"][:, i].max()))]
        for i, k in enumerate(steps)
    ]  # fmt: skip
    header = ["heads_removed", "share_removed", "by_importance", "random_mean", "random_min", "random_max"]
    downloads("pruning", csv_data=csv_bytes(header, rows))

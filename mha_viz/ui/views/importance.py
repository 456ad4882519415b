"""The Head importance tab: each head's effect on the model's output when removed, and the pruning curve."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.plans.importance import (
    curve_rows,
    curve_summary,
    importance_rows,
    measured_texts,
    most_important,
    starts_by_itself,
)
from mha_viz.figures import pruning_figure
from mha_viz.pipeline import budget
from mha_viz.pipeline.pace import eta
from mha_viz.studies import importance
from mha_viz.ui.cache import model_of
from mha_viz.ui.cache_studies import get_curve, get_importance, has_importance
from mha_viz.ui.choices import clicked_points
from mha_viz.ui.common import csv_bytes, downloads, layer_head_map, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.links import check_choice
from mha_viz.ui.long_run import long_run, run_key
from mha_viz.ui.opened import open_head
from mha_viz.ui.request import sizes
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
    return measured_texts(choice, ctx.text, EXAMPLES)


def importance_view(ctx: Ctx) -> None:
    lm = model_of(ctx.config)
    n = ctx.base.n_layers * ctx.base.n_heads
    measure = importance.measure_name(lm)
    st.markdown(
        f"**Importance of a head** = how much the model's output changes when that head alone is removed (its "
        f"slice of the attention output zeroed on its way into W^O, as in the Ablation tab). Output measure: "
        f"**{measure}**. After Michel et al. 2019, *Are Sixteen Heads Really Better than One?*"
    )
    texts = _texts(ctx)
    args = (ctx.config, texts, ctx.target, ctx.part)
    tokens = len(ctx.base.tokens.ids)
    pass_s = budget.SECONDS_PER_GFLOP * sizes("Head importance", ctx).pass_gflop()  # one pass (the page's text)
    scan_s = budget.SECONDS_BASE + pass_s * n * len(texts)
    waiting = lambda: st.caption(
        f"{n} heads × {len(texts)} text(s), {tokens} tokens: one forward pass of the whole model each, "
        f"{eta(scan_s)}. Press the button to start (it shows its progress and can be cancelled)."
    )
    if has_importance("importance", *args):
        imp = get_importance(*args)
    else:
        auto = starts_by_itself(n, len(texts), tokens, AUTO_HEADS)
        imp = long_run(run_key("imp_go", args), f"Scan all {n} heads", auto, waiting,
                       lambda progress: get_importance(*args, progress), scan_s)  # fmt: skip
        if imp is None:
            return
    title = f"Importance of each head ({measure}); click a cell to open the head"
    layer_head_map(imp.astype(np.float32), title, "importance", "imp_map", ctx.image_format, on_select=_open_head)
    order = importance.pruning_order(imp)
    st.markdown(most_important(imp, order))
    downloads("importance", csv_data=csv_bytes(["layer", "head", "importance"], importance_rows(imp)))
    _curve(ctx, args, order, pass_s, measure)


def _curve(ctx: Ctx, args: tuple, order: list[tuple[int, int]], pass_s: float, measure: str) -> None:
    """The pruning curve: least important first against random orders (its own button), with its download."""
    n = ctx.base.n_layers * ctx.base.n_heads
    st.markdown(
        "**Pruning curve.** Heads are removed one after another, least important first in a fixed order (smallest "
        "|importance| above first, not recomputed after each removal), against random orders "
        f"({len(importance.RANDOM_SEEDS)} seeds: their mean and range)."
    )
    if has_importance("curve", *args):
        curve = get_curve(*args)
    else:
        runs = len(importance.curve_steps(n)) * (1 + len(importance.RANDOM_SEEDS)) * len(args[1])
        curve_s = budget.SECONDS_BASE + pass_s * runs
        waiting = lambda: st.caption(f"{runs} forward passes, {eta(curve_s)}.")
        curve = long_run(run_key("curve_go", args), "Compute the pruning curve", False, waiting,
                         lambda progress: get_curve(*args, progress), curve_s)  # fmt: skip
        if curve is None:
            return
    short = importance.measure_short(model_of(ctx.config))
    fig = pruning_figure(curve["steps"] / n, curve["by_importance"], curve["random"], short,
                         f"{measure} as heads are removed")  # fmt: skip
    plot(fig, "pruning", ctx.image_format)
    st.caption(curve_summary(curve, order, n))
    header = ["heads_removed", "share_removed", "by_importance", "random_mean", "random_min", "random_max"]
    downloads("pruning", csv_data=csv_bytes(header, curve_rows(curve, n)))

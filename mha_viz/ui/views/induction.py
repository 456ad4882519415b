"""The Induction heads tab: random tokens repeated twice through a decoder (mha_viz/studies/induction.py).

A layer × head map of every head's induction score (a click opens the head in the Heads view), the top
heads, and the model's per-token loss on the first copy against the second (in-context learning).
"""

from __future__ import annotations

import streamlit as st

from mha_viz.analysis.plans import induction as plan
from mha_viz.config import INDUCTION_LENGTH, MAX_SEED, MIN_INDUCTION_LENGTH
from mha_viz.figures import induction_map, loss_lines
from mha_viz.studies.induction import InductionRun, is_decoder, max_length, run_induction
from mha_viz.ui.cache import get_model, model_of
from mha_viz.ui.choices import clicked_points
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.opened import open_head
from mha_viz.ui.sidebar import check_int

COLUMNS = ("layer", "head", "induction_score")


@sized_cache(max_entries=8, max_mb=16)
def get_induction(model_name: str, device: str, length: int, seed: int) -> InductionRun:
    """The experiment on the loaded model (scores [L, H], losses per position and the tokens: a few KB)."""
    return run_induction(get_model(model_name, device), length, seed)


def _open_head(layer: int, head: int) -> None:
    open_head(layer, head)


def _on_cell_click() -> None:
    for _, custom in clicked_points("ind_map"):  # customdata (layer, head, score)
        if len(custom) >= 2:
            _open_head(int(custom[0]), int(custom[1]))
            return


def induction_view(ctx: Ctx) -> None:
    lm = None if ctx.base.own else model_of(ctx.config)
    refused = plan.refusal(lm is None, lm is not None and is_decoder(lm), bool(lm and lm.encoder_decoder),
                           ctx.base.model_name)  # fmt: skip
    if refused:
        st.info(refused)
        return
    st.markdown(
        "**Induction heads** (Olsson et al. 2022): N random tokens, then the same N again. A head that has learned "
        "*“after A came B before, so look at B”* attends, from each token of the second copy, to the token right "
        "after its earlier copy. **Induction score** = that attention averaged over the second copy (1 = all of "
        "it). The model's loss on the second copy drops when it copies from the first."
    )
    longest = max_length(lm)
    default = plan.default_length(INDUCTION_LENGTH, longest)
    length_bind = check_int("ind_length", MIN_INDUCTION_LENGTH, longest, default)  # None: the link's value is ignored
    seed_bind = check_int("ind_seed", 0, MAX_SEED, 0)
    c1, c2 = st.columns(2)
    length = int(
        c1.number_input(
            "Tokens per copy (N)", MIN_INDUCTION_LENGTH, longest, default, key="ind_length", bind=length_bind
        )
    )
    seed = int(c2.number_input("Seed", 0, MAX_SEED, 0, key="ind_seed", bind=seed_bind))
    run = get_induction(ctx.config.model_name, ctx.config.model_device, length, seed)
    bos = run.tokens.labels[0] if run.offset else None
    p = plan.induction_plan(run.scores, len(run.tokens.ids), bos, length, seed, run.mean_loss(0), run.mean_loss(1))
    st.caption(p.caption)
    title = f"{ctx.base.model_name}: induction score of every layer × head (click a cell to open the head)"
    plot(induction_map(run.scores, title), "ind_map", ctx.image_format, on_select=_on_cell_click)
    st.markdown("**Top heads** (rank, layer, head, induction score):")
    for rank, (la, he, s) in enumerate(p.top, 1):
        a, b = st.columns([4, 1])
        a.write(f"{rank}. layer {la}, head {he}: {s:.3f}")
        b.button("Open", key=f"ind_open_{rank}", on_click=_open_head, args=(la, he))
    m1, m2 = st.columns(2)
    m1.metric("Mean loss, first copy", p.losses[0])
    m2.metric("Mean loss, second copy", p.losses[1], delta=p.losses[2], delta_color="inverse")
    plot(loss_lines(run.copy_losses(0), run.copy_losses(1)), "ind_loss", ctx.image_format)
    downloads("induction", csv_data=csv_bytes(COLUMNS, p.rows))

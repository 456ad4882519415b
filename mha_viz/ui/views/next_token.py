"""The Next token tab (causal LMs): top-5 next tokens, the logit lens, and each head's direct logit attribution."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.plans.next_token import dla_plan, lens_table, target_names
from mha_viz.config import LENS_POSITIONS
from mha_viz.figures import logit_lens, matrix_heatmap
from mha_viz.studies import logits
from mha_viz.studies.logits import Readout
from mha_viz.ui.cache import get_model, get_recording, model_of
from mha_viz.ui.choices import valid_choice
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.opened import open_head

LENS_MAX_TOKENS = LENS_POSITIONS  # the lens runs on, and its heatmap shows, at most this many positions (the last)


@sized_cache(max_entries=16, max_mb=32)
def get_readout(model_name: str, device: str, text: str, position: int | None) -> Readout:
    """Top-5, logit lens (on the last LENS_MAX_TOKENS positions) and direct logit attribution of ``text`` at
    ``position`` (None: the last token)."""
    lm = get_model(model_name, device)
    rec = get_recording(model_name, device, text, None)
    first = max(0, len(rec.tokens.ids) - LENS_MAX_TOKENS)
    return logits.readout(lm, text, position, rec=rec, lens_from=first)


def _open_head(layer: int, head: int) -> None:
    open_head(layer, head)


def next_token_view(ctx: Ctx) -> None:
    if ctx.base.own or not logits.is_causal_lm(model_of(ctx.config)):
        st.info(
            "This view is for decoders (causal language models with an LM head, such as SmolLM2 or GPT-2): it "
            "reads the next token off the residual stream. Pick one in the sidebar."
        )
        return
    ctx.hiding_not_applied("every position of the residual stream is read as it is.")
    labels = list(ctx.base.tokens.labels)
    valid_choice("nt_pos", labels, labels[-1])
    chosen = st.selectbox("Predict the token after", labels, key="nt_pos", bind="query-params")
    pos = labels.index(chosen)
    r = get_readout(ctx.config.model_name, ctx.config.model_device, ctx.text, pos)

    st.markdown(f"**Next token after “{labels[pos]}”** (the model's own probabilities)")
    st.table({"rank": list(range(1, len(r.top_ids) + 1)), "token": list(r.top_labels),
              "id": list(r.top_ids), "p": [f"{p:.4f}" for p in r.top_probs]})  # fmt: skip
    _lens(ctx, r, labels[pos])
    _attribution(ctx, r, labels[pos])


def _lens(ctx: Ctx, r: Readout, after: str) -> None:
    """The logit lens map over the last positions, and its top tokens per layer at the chosen one."""
    first = r.lens_first  # the lens rows read positions first..n-1
    plot(logit_lens(r.lens_probs, r.tokens.labels[first:], r.lens_labels), "lens_map", ctx.image_format)
    st.caption(
        "Logit lens: the residual stream after layer l (the hidden state the next layer reads) passed through the "
        f"model's own final norm ({r.norm_kind}) and LM head, as if the model stopped there. The last row is the "
        "model's own prediction." + (f" Showing the last {LENS_MAX_TOKENS} positions." if first else "")
    )
    with st.expander(f"Logit lens at “{after}”: top {r.lens_top_ids.shape[1]} per layer"):
        st.table(lens_table(r.lens_top_labels, r.lens_top_probs, r.lens_final, r.top_labels[0]))


def _attribution(ctx: Ctx, r: Readout, after: str) -> None:
    """Direct logit attribution to a chosen top token: the layer × head map, the parts of the logit, the top heads."""
    st.markdown("**Direct logit attribution**: each head's share of the next-token logit")
    options = list(range(len(r.top_ids)))
    names = target_names(r.top_labels, r.top_probs)  # how the link names them
    valid_choice("dla_token", options, 0, label=names.__getitem__)
    t = st.selectbox("Target token", options, key="dla_token", format_func=names.__getitem__, bind="query-params")
    plan = dla_plan(r, t, after)
    L, H = plan.heads.shape
    fig = matrix_heatmap(plan.heads, [f"H{h}" for h in range(H)], [f"L{la}" for la in range(L)], plan.title,
                         diverging=True, value_name="logit")  # fmt: skip
    plot(fig, "dla_map", ctx.image_format)
    st.caption(plan.caption)
    if plan.indirect:
        st.warning(
            "In this model a norm sits between W^O and the residual stream, so a head's output after W^O is not "
            "what it adds to the stream: these numbers are not its direct effect (the difference is in “the rest”)."
        )
    st.table(plan.table)
    if plan.mismatch:
        st.warning(
            f"The parts add up to {plan.total:.4f} but the model's logit is {plan.model:.4f}: this model changes its "
            "logits after the LM head (soft-capping or scaling), so the attribution is to the LM head's raw output."
        )
    st.markdown("**Top heads** (rank, layer, head, logit):")
    for rank, (la, he, v) in enumerate(plan.top, 1):
        a, b = st.columns([4, 1])
        a.write(f"{rank}. layer {la}, head {he}: {v:+.3f}")
        b.button("Open", key=f"dla_open_{rank}", on_click=_open_head, args=(la, he))
    rows = [[la, he, f"{plan.heads[la, he]:.6g}"] for la in range(L) for he in range(H)]
    first = r.lens_first
    downloads(
        "next_token",
        npz={"dla": plan.heads.astype(np.float32), "lens_probs": r.lens_probs, "lens_ids": r.lens_ids,
             "lens_positions": np.arange(first, first + r.lens_ids.shape[1]),
             "top_ids": np.asarray(r.top_ids), "top_probs": r.top_probs},
        csv_data=csv_bytes(["layer", "head", "logit"], rows),
    )  # fmt: skip

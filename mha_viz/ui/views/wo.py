"""The W^O tab: W^O itself (one band per head) beside the W^O a what-if swaps in, what the output change means,
what each head adds after it, and the one-head check."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.patterns import contribution_norms, output_change
from mha_viz.analysis.plans.wo import meaning, wo_plan
from mha_viz.config import MAX_SEED
from mha_viz.figures.finish import Finished, finish
from mha_viz.figures.heatmap import HALF_ROW_TITLE_CHARS as TITLE_CHARS
from mha_viz.figures.wo_pair import wo_pair
from mha_viz.trace import AttentionTrace
from mha_viz.ui.choices import valid_choice, valid_choices
from mha_viz.ui.claims import show_identity_claim, wo_words
from mha_viz.ui.common import cached_figure, csv_bytes, downloads, head_names, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.links import check_float, check_int
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.timing import timed_fragment

WO_MODES = {
    "identity": "identity (plain concat)",
    "random": "random orthogonal",
    "ablate": "ablate heads",
    "scale": "scale a head",
}  # each compared with this layer's own W^O (learned only for a trained model)


@sized_cache(max_entries=16, max_mb=16)
def wo_pair_figure(
    W_O: np.ndarray, in_use: np.ndarray, titles: tuple[str, str], title_chars: int | None = None
) -> tuple[Finished, str]:
    """figures.wo_pair (the layer's W^O beside the W^O in use, one chart), finished and kept: its pooling and
    Plotly build are the tab's largest cost, and a switch back to the tab draws it from here."""
    fig, note = wo_pair(W_O, in_use, titles, title_chars)
    return finish(fig), note


def _wo_edits(h: int) -> dict:
    """The W^O variant the user picked, as Config fields (compared with the layer's own W^O)."""
    mode = st.radio(
        "W^O", list(WO_MODES), format_func=WO_MODES.get, key="wo_mode", bind="query-params", horizontal=True
    )
    if mode == "identity":
        return {"wo": "identity"}
    if mode == "random":
        bind = check_int("wo_seed", 0, MAX_SEED, 0)  # None: the link's value is ignored, Streamlit must not read it
        seed = st.number_input("Seed", 0, MAX_SEED, 0, key="wo_seed", bind=bind)
        return {"wo": "random", "wo_seed": int(seed)}
    if mode == "ablate":
        valid_choices("ablate", list(range(h)), [0])
        chosen = st.multiselect(
            "Heads to ablate (their W^O block is zeroed)",
            list(range(h)),
            default=[0],
            key="ablate",
            bind="query-params",
            format_func=lambda i: f"head {i}",
        )
        return {"ablate": tuple(int(i) for i in chosen)}
    c1, c2 = st.columns(2)
    valid_choice("scale_head", list(range(h)), 0)
    bind = check_float("scale_factor", 0.0, 3.0, 2.0)
    head = c1.selectbox(
        "Head", list(range(h)), key="scale_head", format_func=lambda i: f"head {i}", bind="query-params"
    )
    factor = c2.slider("Factor", 0.0, 3.0, 2.0, 0.1, key="scale_factor", bind=bind)
    return {"head_scale": ((int(head), float(factor)),)}


def _intro(ctx: Ctx) -> str:
    """What W^O does, with "learned" only where a trained model's W^O is shown."""
    fuse = "W^O (h·d_k × d_model) fuses the concatenated heads: plain concatenation would treat every head alike; "
    if not ctx.base.own:
        return (
            fuse + "the learned W^O decides how much of each head goes where. Swap it and compare with the learned one."
        )
    return (
        fuse + f"in a trained model W^O is learned to decide how much of each head goes where. {wo_words(ctx)}. "
        "The comparisons below are against this W^O."
    )


def wo_view(ctx: Ctx) -> None:
    base = ctx.trace(x=False)
    st.markdown(_intro(ctx))
    _what_if(ctx)
    st.markdown("**One head and W^O = identity is plain single-head self-attention** (the check of the Lesson tab)")
    # its result in words; its three matrices only while the expander is open (the Lesson tab draws them too): a
    # chart fewer for the browser to draw twice on every switch to this tab (issue 36 §6)
    if not st.session_state.get("wo_identity_open"):  # closed: the result first, in words
        show_identity_claim(ctx, base.tokens, "wo_identity", st.caption, chart=False)
    box = st.expander("The check's matrices: h = 1 with W^O = I, plain self-attention, their difference",
                      key="wo_identity_open", on_change="rerun")  # fmt: skip
    if box.open:
        with box:
            show_identity_claim(ctx, base.tokens, "wo_identity", st.caption)


@st.fragment
@timed_fragment
def _what_if(ctx: Ctx) -> None:
    """W^O swapped for another and the output compared: a fragment, so a change of the variant (mode, seed, heads,
    factor) reruns only this part."""
    base = ctx.trace(x=False)
    edits = _wo_edits(base.n_heads)
    t = ctx.trace(x=False, **edits)
    plan = wo_plan(ctx.where, ctx.base.own, bool(ctx.config.weights_file), edits, tuple(base.W_O.shape),
                   base.routing is not None)  # fmt: skip
    fig, note = wo_pair_figure(base.W_O.numpy(), t.W_O.numpy(), tuple(plan.titles), TITLE_CHARS)
    plot(fig, "wo_pair", ctx.image_format)  # one chart of two panels, not two charts (issue 36 §6)
    if note:
        st.caption(note)
    labels, h = t.tokens, base.n_heads
    change = output_change(base.output.numpy(), t.output.numpy())
    routed = t.routing is not None  # W^O chosen per token: each head through its token's expert, gated
    norms = t.head_out.norm(dim=-1).numpy() if routed else contribution_norms(t.z.numpy(), t.W_O.numpy())  # [h, n]
    series = {"relative change |Δ| / |output|": change["relative"], plan.cosine: change["cosine"]}
    titles = (
        "Output change per token (this layer's attention output, before residual and LayerNorm)",
        "Each head's contribution after W^O: ‖z_h · W^O_h‖ per token",
    )
    fig = cached_figure("wo_change_and_contributions", tuple(labels), series, norms, tuple(head_names(h)), titles)
    plot(fig, "wo_change", ctx.image_format)  # the change and the heads' contributions: one chart (issue 36 §6)
    st.caption(meaning(st.session_state.get("wo_mode", "identity")))
    _downloads(base, t, norms, change)


def _downloads(base: AttentionTrace, t: AttentionTrace, norms: np.ndarray, change: dict[str, np.ndarray]) -> None:
    """The W^O matrices, the heads' contributions and the outputs (.npz), the change per token (.csv)."""
    labels = t.tokens
    downloads(
        "wo",
        npz={
            "tokens": np.asarray(labels, dtype=str),
            "W_O": base.W_O.numpy().reshape(base.W_O.shape[0] * base.W_O.shape[1], -1),  # (a routed layer: experts')
            "W_O_in_use": t.W_O.numpy().reshape(t.W_O.shape[0] * t.W_O.shape[1], -1),
            "head_out_norm": norms.astype(np.float32),
            "output": t.output.numpy(),
            "original_output": base.output.numpy(),
        },
        csv_data=lambda: change_csv(labels, change),
    )


def change_csv(labels: tuple[str, ...], change: dict[str, np.ndarray]) -> bytes:
    """The output change per token, as the .csv download (built when it is clicked)."""
    rows = [[labels[i], f"{change['relative'][i]:.6g}", f"{change['cosine'][i]:.6g}"] for i in range(len(labels))]
    return csv_bytes(["token", "relative_change", "cosine"], rows)

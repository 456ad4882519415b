"""The Induction heads tab: random tokens repeated twice through a decoder (mha_viz/induction.py).

A layer × head map of every head's induction score (a click opens the head in the Heads view), the top
heads, and the model's per-token loss on the first copy against the second (in-context learning).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from mha_viz.figures.common import SEQUENTIAL, _f32, safe
from mha_viz.induction import MAX_SEED, MIN_LENGTH, InductionRun, is_decoder, max_length, run_induction
from mha_viz.ui.cache import get_model, model_of
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx, clicked_points
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.sidebar import check_int

DEFAULT_LENGTH = 50
COLUMNS = ("layer", "head", "induction_score")


@sized_cache(max_entries=8, max_mb=16)
def get_induction(model_name: str, device: str, length: int, seed: int) -> InductionRun:
    """The experiment on the loaded model (scores [L, H], losses per position and the tokens: a few KB)."""
    return run_induction(get_model(model_name, device), length, seed)


def induction_map(scores: np.ndarray, title: str) -> go.Figure:
    """Layer (rows) × head (columns) heatmap of the scores, 0 to 1; one invisible marker per cell carries the
    hover text and reports clicks as customdata (layer, head, score). Shapes: scores [L, H]."""
    n_layers, n_heads = scores.shape
    lx, hx = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")
    fig = go.Figure(
        go.Heatmap(
            z=_f32(scores),
            x=list(range(n_heads)),
            y=list(range(n_layers)),
            colorscale=SEQUENTIAL,
            zmin=0.0,
            zmax=1.0,
            xgap=1,
            ygap=1,
            hoverinfo="skip",
            colorbar={"title": {"text": "induction"}},
        )
    )
    custom = _f32(np.stack([lx.ravel(), hx.ravel(), np.asarray(scores, dtype=np.float64).ravel()], axis=1))
    fig.add_trace(
        go.Scatter(
            x=hx.ravel().astype(np.float32),
            y=lx.ravel().astype(np.float32),
            mode="markers",
            marker={"size": max(8, min(30, 600 // max(n_heads, 1))), "opacity": 0, "symbol": "square"},
            customdata=custom,
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}: induction %{customdata[2]:.3f}"
            "<br>click to open<extra></extra>",
            showlegend=False,
        )
    )
    fig.update_xaxes(
        tickvals=list(range(n_heads)), ticktext=[f"H{h}" for h in range(n_heads)], showgrid=False, zeroline=False
    )
    fig.update_yaxes(
        tickvals=list(range(n_layers)),
        ticktext=[f"L{la}" for la in range(n_layers)],
        autorange="reversed",
        showgrid=False,
        zeroline=False,
    )
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=int(min(1000, max(300, 22 * n_layers + 110))),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        hovermode="closest",
        clickmode="event+select",
    )
    return safe(fig)


def loss_lines(run: InductionRun) -> go.Figure:
    """The loss of each token of the first copy and of the second, by position in the copy."""
    x = np.arange(run.length)
    fig = go.Figure(
        [
            go.Scatter(
                x=x,
                y=_f32(run.copy_losses(which)),
                mode="lines+markers",
                name=f"{name} copy (mean {run.mean_loss(which):.2f})",
                hovertemplate=f"token %{{x}} of the {name} copy: loss %{{y:.2f}}<extra></extra>",
            )
            for which, name in ((0, "first"), (1, "second"))
        ]
    )
    fig.update_xaxes(title={"text": "position in the copy"})
    fig.update_yaxes(title={"text": "loss (nats)"}, rangemode="tozero")
    fig.update_layout(
        title={"text": "Per-token loss: first copy vs second copy", "font": {"size": 14}},
        height=360,
        legend={"orientation": "h", "y": 1.12},
        margin={"l": 10, "r": 10, "t": 70, "b": 10},
    )
    return safe(fig)


def _open_head(layer: int, head: int) -> None:
    st.session_state.update(layer=layer, head=head, view="Heads")


def _on_cell_click() -> None:
    for _, custom in clicked_points("ind_map"):  # customdata (layer, head, score)
        if len(custom) >= 2:
            _open_head(int(custom[0]), int(custom[1]))
            return


def induction_view(ctx: Ctx) -> None:
    if ctx.base.own:
        st.info("The induction experiment needs a decoder (a causal language model), e.g. the bundled SmolLM2.")
        return
    lm = model_of(ctx.config)
    if not is_decoder(lm):
        kind = "an encoder-decoder" if lm.encoder_decoder else "an encoder"
        st.info(
            f"The induction experiment needs a decoder (a causal language model such as the bundled SmolLM2); "
            f"{ctx.base.model_name} is {kind} model."
        )
        return
    st.markdown(
        "**Induction heads** (Olsson et al. 2022): N random tokens, then the same N again. A head that has learned "
        "*“after A came B before, so look at B”* attends, from each token of the second copy, to the token right "
        "after its earlier copy. **Induction score** = that attention averaged over the second copy (1 = all of "
        "it). The model's loss on the second copy drops when it copies from the first."
    )
    longest = max_length(lm)
    check_int("ind_length", MIN_LENGTH, longest, DEFAULT_LENGTH)
    check_int("ind_seed", 0, MAX_SEED, 0)
    c1, c2 = st.columns(2)
    length = int(
        c1.number_input(
            "Tokens per copy (N)", MIN_LENGTH, longest, min(DEFAULT_LENGTH, longest), key="ind_length",
            bind="query-params",
        )
    )  # fmt: skip
    seed = int(c2.number_input("Seed", 0, MAX_SEED, 0, key="ind_seed", bind="query-params"))
    run = get_induction(ctx.config.model_name, ctx.config.model_device, length, seed)
    bos = f"{run.tokens.labels[0]} (the model's BOS token), then " if run.offset else ""
    st.caption(
        f"{len(run.tokens.ids)} tokens: {bos}{length} random ordinary tokens (seed {seed}), then the same "
        f"{length} again. Scores are over the {length - 1} second-copy tokens that have a token after their "
        "earlier copy."
    )
    scores = run.scores
    title = f"{ctx.base.model_name}: induction score of every layer × head (click a cell to open the head)"
    plot(induction_map(scores, title), "ind_map", ctx.c.image_format, on_select=_on_cell_click)
    st.markdown("**Top heads** (rank, layer, head, induction score):")
    for rank, (la, he, s) in enumerate(run.top_heads(5), 1):
        a, b = st.columns([4, 1])
        a.write(f"{rank}. layer {la}, head {he}: {s:.3f}")
        b.button("Open", key=f"ind_open_{rank}", on_click=_open_head, args=(la, he))
    first, second = run.mean_loss(0), run.mean_loss(1)
    m1, m2 = st.columns(2)
    m1.metric("Mean loss, first copy", f"{first:.2f} nats")
    m2.metric("Mean loss, second copy", f"{second:.2f} nats", delta=f"{second - first:.2f}", delta_color="inverse")
    plot(loss_lines(run), "ind_loss", ctx.c.image_format)
    n_layers, n_heads = scores.shape
    rows = [[la, he, f"{scores[la, he]:.6g}"] for la in range(n_layers) for he in range(n_heads)]
    downloads("induction", csv_data=csv_bytes(COLUMNS, rows))

"""The Lesson tab: the seven steps of multi-head attention on this text, model and layer, for one head, then
the two claims of the source articles checked live (see mha_viz.analysis.lesson for the content)."""

from __future__ import annotations

import dataclasses

import streamlit as st

from mha_viz.analysis.lesson import Panel, Step
from mha_viz.config import WINDOW_ROWS
from mha_viz.figures.lesson import mark_row
from mha_viz.trace import AttentionTrace
from mha_viz.ui.cache_studies import get_loop_vs_batched
from mha_viz.ui.choices import valid_choice
from mha_viz.ui.claims import all_rows, show_equivalence, show_identity_claim
from mha_viz.ui.common import cached_figure, forget_figures, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.lazy import LazyBoxes
from mha_viz.ui.lesson_screen import (
    FIRST_SCREEN,
    HEIGHT,
    FirstMap,
    figure_call,
    first_map,
    intro_text,
    lesson_steps,
    opening_of,
    row_caption,
    window_rows,
)
from mha_viz.ui.opened import follow_head
from mha_viz.ui.sidebar import plain as escaped
from mha_viz.ui.timing import timed_fragment
from mha_viz.ui.variant_section import variant_section

PER_ROW = 2  # matrices side by side (their height: lesson_screen.HEIGHT, Step by step's sizing)


STEP_KEY = "lesson_step_{}"  # session_state: whether step n's expander is open (the claims: CLAIM_KEYS)
CLAIM_KEYS = ("lesson_claim_a", "lesson_claim_b")
N_STEPS = 7


def _open_keys() -> list[str]:
    return [STEP_KEY.format(n) for n in range(1, N_STEPS + 1)] + list(CLAIM_KEYS)


BOXES = LazyBoxes("lesson", _open_keys(), STEP_KEY.format(1))  # step 1 open at first, the rest on request


def lesson_view(ctx: Ctx) -> None:
    ctx.hiding_not_applied("the lesson shows every matrix exactly as the model computes it.")
    _lesson(ctx)


@st.fragment
@timed_fragment
def _lesson(ctx: Ctx) -> None:
    """The lesson: every step's header is shown, its matrices only while it is open (step 1 at first), so the first
    page draws one step; a fragment, so opening a step or choosing another head reruns only the lesson."""
    forget_figures("lesson_")  # a step closed since the last run no longer belongs in the page's .html download
    t = ctx.trace()
    h = t.n_heads
    opening = opening_of(ctx, t)
    took = follow_head(ctx, "lesson_head", h, default=opening.head)  # the opened head (else this layer's first)
    left, right = st.columns([3, 1], vertical_alignment="bottom")
    i = int(
        left.selectbox(
            "Head", list(range(h)), key="lesson_head", bind="query-params", format_func=lambda j: f"head {j}",
            on_change=took,
        )
    )  # fmt: skip
    BOXES.button(right, "lesson_open_all", "Every step's matrices and both claims at once (a longer page to draw).")
    # the first screen: the head's attention is its largest picture (two thirds of the width), the words beside it
    # (lesson_screen: the server's stored first page is recorded from the same functions)
    intro, first = st.columns(FIRST_SCREEN)
    intro.markdown(intro_text(ctx, i, h))
    intro.caption(escaped(opening.shown(i)))
    steps = lesson_steps(ctx, t, i)
    rows = _row_window(len(t.tokens))
    it = opening.marked(rows)
    shown = first_map(t, steps, i, rows, it)
    if shown is not None:
        with first:
            plot(first_figure(shown), "lesson_first", ctx.image_format)
    if it is not None:
        intro.caption(row_caption(t, it))
    _steps(ctx, t, steps, rows, it)
    variant_section(ctx, t, i, rows, "lesson_variant")  # own weights as GQA/MQA/MOHSA/MoH/DCMHA: the extra steps
    _claims(ctx, rows)


def _steps(ctx: Ctx, t: AttentionTrace, steps: list[Step], rows: slice, it: int | None) -> None:
    """Every step's box; an open one draws its matrices two to a row (row ``it`` outlined where rows are tokens)."""
    for step in steps:
        box = BOXES.box(f"Step {step.number}. {step.title}", STEP_KEY.format(step.number))
        if not box.open:
            continue
        with box:
            st.markdown(step.text)
            for start in range(0, len(step.panels), PER_ROW):  # rows of up to two matrices, as in Step by step
                cols = st.columns(PER_ROW)
                for j, p in enumerate(step.panels[start : start + PER_ROW]):
                    with cols[j]:
                        shown = window_rows(p, rows)
                        fig = lesson_figure(shown)
                        if it is not None and shown.row_labels == tuple(t.tokens[rows]):  # rows are the query tokens
                            fig = mark_row(fig, it - rows.start, t.tokens[it])
                        plot(fig, f"lesson_{step.number}_{start + j}", ctx.image_format)
            st.caption(f"More: the {step.deeper} tab ({step.deeper_why}).")


def lesson_figure(p: Panel, height: int = HEIGHT, width: int | None = None) -> dict:
    """A step panel's heatmap, finished and kept (a head, layer or text seen before is drawn again from the cache)."""
    call = figure_call(p, height, width)
    return cached_figure(call.builder, *call.args, **call.kwargs)


def first_figure(shown: FirstMap) -> dict:
    """The first screen's map, its row outlined (the server's stored first page draws the same: serve/light.py)."""
    call = shown.call
    fig = cached_figure(call.builder, *call.args, **call.kwargs)
    return fig if shown.mark is None else mark_row(fig, *shown.mark)


def _row_window(n: int) -> slice:
    """Which query rows the lesson draws: all up to WINDOW_ROWS tokens; beyond, a window the user moves (each
    matrix then has WINDOW_ROWS rows, every column, every value exact: its cost no longer grows with n²)."""
    if n <= WINDOW_ROWS:
        return slice(0, n)
    starts = sorted({*range(0, n - WINDOW_ROWS + 1, WINDOW_ROWS // 2), n - WINDOW_ROWS})

    def fmt(s: int) -> str:
        return f"tokens {s}–{s + WINDOW_ROWS - 1}"

    valid_choice("lesson_rows", starts, starts[0], fmt)
    a = int(
        st.selectbox(
            f"Rows shown (a window of {WINDOW_ROWS} of the {n} tokens)", starts, key="lesson_rows",
            bind="query-params", format_func=fmt,
        )
    )  # fmt: skip
    st.caption(
        f"{n} tokens: each matrix shows query rows {a}–{a + WINDOW_ROWS - 1} (every key column, the exact values); "
        "the n × n matrices would have too many cells to draw and read. Move the window above."
    )
    return slice(a, a + WINDOW_ROWS)


def _claims(ctx: Ctx, rows: slice | None = None) -> None:
    t = ctx.trace()
    st.markdown("#### Two claims of the articles, checked on this layer now")
    rows = rows or slice(0, len(t.tokens))
    box = BOXES.box("(a) Small matrices or one big matrix: the same result", CLAIM_KEYS[0])
    if box.open:
        with box:
            st.markdown(
                "A loop over the heads (each with its own projections, softmax(Q_h K_hᵀ · s) V_h, then concat and "
                "· W^O) against the fast form: one projection for all heads, reshaped into [heads × tokens × d_k], "
                "one batched product."
            )
            if t.routing is not None:  # JetMoE: each token's experts' W^O, no one W^O for the big form
                st.caption("This layer's W^O is chosen per token (a mixture of attention heads): no one big W^O.")
            else:
                _loop_vs_batched(ctx, t.tokens, rows)
    box = BOXES.box("(b) One head with W^O = I is plain self-attention", CLAIM_KEYS[1])
    if box.open:
        with box:
            st.markdown(
                "Re-split this layer's projections into a single head of width d_model and replace W^O by the "
                "identity: the result is softmax(X W_Q (X W_K)ᵀ / √d) X W_V."
            )
            hint = " The bundled MiniLM or own weights show it."
            show_identity_claim(ctx, t.tokens, "lesson_eq_b", st.info, hint, rows)


def _loop_vs_batched(ctx: Ctx, tokens: tuple[str, ...], rows: slice) -> None:
    eq = get_loop_vs_batched(ctx.sel, ctx.base.plain)
    if rows.stop - rows.start < len(tokens):  # the window's rows; the largest difference is over every row
        eq = dataclasses.replace(eq, left=eq.left[rows], right=eq.right[rows], note=eq.note + all_rows(eq))
    show_equivalence(
        eq, tokens[rows], "Loop over heads vs one big matrix: the layer's output", "lesson_eq_a", ctx.image_format
    )

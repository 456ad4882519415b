"""The Lesson tab: the seven steps of multi-head attention on this text, model and layer, for one head, then
the two claims of the source articles checked live (see mha_viz.analysis.lesson for the content)."""

from __future__ import annotations

import dataclasses

import streamlit as st

from mha_viz.analysis.lesson import Panel, Step, build_steps
from mha_viz.analysis.plans.lesson import lesson_opening
from mha_viz.config import WINDOW_ROWS
from mha_viz.figures.heatmap import HALF_ROW_TITLE_CHARS as TITLE_CHARS
from mha_viz.figures.lesson import mark_row
from mha_viz.trace import AttentionTrace
from mha_viz.ui.cache_studies import get_loop_vs_batched, get_plain_weights
from mha_viz.ui.choices import valid_choice
from mha_viz.ui.claims import all_rows, show_equivalence, show_identity_claim, wo_words
from mha_viz.ui.common import cached_figure, forget_figures, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.lazy import LazyBoxes
from mha_viz.ui.opened import follow_head
from mha_viz.ui.sidebar import plain as escaped
from mha_viz.ui.timing import timed_fragment
from mha_viz.ui.variant_section import variant_section

PER_ROW, HEIGHT = 2, 380  # matrices side by side, and their height: Step by step's sizing (two per row, 380 px)
FIRST_SCREEN, FIRST_HEIGHT = [1, 2], 440  # the first screen's words and map (the map the largest picture on it)
FIRST_WIDTH = 560  # about how wide that map is drawn at 1280 px (two thirds of the page): its labels' room


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
    b = ctx.base
    h = t.n_heads
    opening = lesson_opening(t.pattern.numpy(), b.tokens.pieces, b.key_tokens.pieces)
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
    intro, first = st.columns(FIRST_SCREEN)
    intro.markdown(
        escaped(
            f"Multi-head attention in seven steps, on your text in {ctx.where} of {b.model_name}, for head {i} of {h}."
        )
        + " On the right, what this head ends with: each token's attention weights over the tokens (a row sums to "
        "1). Every matrix below is the one this layer computes (hover for the numbers); change the text, the layer "
        "or the head and the lesson follows. Open a step to see how the weights are made."
    )
    intro.caption(escaped(opening.shown(i)))
    weights = get_plain_weights(ctx.sel) if b.plain else None
    steps = build_steps(t, i, plain=b.plain, weights=weights, scaled=ctx.config.scaled, wo_words=wo_words(ctx))
    rows = _row_window(len(t.tokens))
    it = opening.marked(rows)
    pattern = next((p for step in steps for p in step.panels if p.kind == "weights"), None)
    if pattern is not None:
        with first:
            shown = window_rows(pattern, rows)
            fig = lesson_figure(dataclasses.replace(shown, title=f"Head {i}: attention weights {shown.shape}"),
                                FIRST_HEIGHT, FIRST_WIDTH)  # fmt: skip
            if it is not None and shown.row_labels == tuple(t.tokens[rows]):
                fig = mark_row(fig, it - rows.start, t.tokens[it])
            plot(fig, "lesson_first", ctx.image_format)
    if it is not None:
        intro.caption(escaped(f"The row of “{t.tokens[it]}” (token {it}) is outlined in red in every token matrix."))
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
    if p.kind == "scores":
        return cached_figure(
            "scores_heatmap", p.matrix, p.col_labels, p.row_labels, p.title, height=height, title_chars=TITLE_CHARS
        )
    return cached_figure(
        "matrix_heatmap",
        p.matrix,
        p.col_labels,
        p.row_labels,
        p.title,
        diverging=p.kind == "signed",
        value_name=p.value_name,
        attention=p.kind == "weights",
        height=height,
        title_chars=TITLE_CHARS,
        **({} if width is None else {"width": width}),  # (the first screen's map: wider than a half row)
    )


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


def window_rows(p: Panel, rows: slice) -> Panel:
    """The panel's query rows in ``rows`` (a panel whose rows are not the tokens, e.g. W^O, is kept whole)."""
    if rows.stop - rows.start >= len(p.row_labels) or p.matrix.shape[0] != len(p.row_labels):
        return p
    return dataclasses.replace(p, matrix=p.matrix[rows], row_labels=p.row_labels[rows])


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

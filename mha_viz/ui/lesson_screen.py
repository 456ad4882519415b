"""The Lesson's first screen as data: the words beside the map, and the map's figure call (which builder, its
arrays, labels and settings) with the marked row. The Lesson view (ui/views/lesson.py) draws it; the server's
stored first page (serve/page_store.py, serve/record.py) records the default page's first screen from the same
functions, so the page drawn from the recording and the live page are built from the same values."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.lesson import Panel, Step, build_steps
from mha_viz.analysis.plans.lesson import LessonOpening, lesson_opening
from mha_viz.config import WINDOW_ROWS
from mha_viz.figures.heatmap import HALF_ROW_TITLE_CHARS as TITLE_CHARS
from mha_viz.trace import AttentionTrace
from mha_viz.ui.cache_studies import get_plain_weights
from mha_viz.ui.claims import wo_words
from mha_viz.ui.context import Ctx
from mha_viz.ui.sidebar import plain as escaped

HEIGHT = 380  # a step's matrices: Step by step's sizing (two per row, 380 px)
FIRST_SCREEN, FIRST_HEIGHT = [1, 2], 440  # the first screen's words and map (the map the largest picture on it)
FIRST_WIDTH = 560  # about how wide that map is drawn at 1280 px (two thirds of the page): its labels' room


@dataclass(frozen=True)
class FigureCall:
    """A figure as ui.common.cached_figure builds it: FIGURE_BUILDERS[builder](matrix, x, y, title, **kwargs).
    Shapes: matrix [rows, cols]; x [cols] or None; y [rows]."""

    builder: str  # "matrix_heatmap" | "scores_heatmap"
    matrix: np.ndarray
    x: tuple[str, ...] | None
    y: tuple[str, ...]
    title: str
    kwargs: dict  # plain values: bool, str, int

    @property
    def args(self) -> tuple:
        return (self.matrix, self.x, self.y, self.title)


@dataclass(frozen=True)
class FirstMap:
    """The first screen's map: its figure call and the row outlined in it (row in the drawn window, its label)."""

    call: FigureCall
    mark: tuple[int, str] | None


@dataclass(frozen=True)
class FirstScreen:
    """The default first screen of the Lesson: the words beside the map (markdown, escaped) and the map."""

    intro: str
    captions: tuple[str, ...]
    first: FirstMap | None


def figure_call(p: Panel, height: int = HEIGHT, width: int | None = None) -> FigureCall:
    """How a step panel's heatmap is built (the Lesson's lesson_figure builds it through cached_figure)."""
    if p.kind == "scores":
        kwargs = {"height": height, "title_chars": TITLE_CHARS}
        return FigureCall("scores_heatmap", p.matrix, p.col_labels, p.row_labels, p.title, kwargs)
    kwargs = {
        "diverging": p.kind == "signed",
        "value_name": p.value_name,
        "attention": p.kind == "weights",
        "height": height,
        "title_chars": TITLE_CHARS,
        **({} if width is None else {"width": width}),
    }  # fmt: skip (the first screen's map: wider)
    return FigureCall("matrix_heatmap", p.matrix, p.col_labels, p.row_labels, p.title, kwargs)


def window_rows(p: Panel, rows: slice) -> Panel:
    """The panel's query rows in ``rows`` (a panel whose rows are not the tokens, e.g. W^O, is kept whole)."""
    if rows.stop - rows.start >= len(p.row_labels) or p.matrix.shape[0] != len(p.row_labels):
        return p
    return dataclasses.replace(p, matrix=p.matrix[rows], row_labels=p.row_labels[rows])


def intro_text(ctx: Ctx, i: int, h: int) -> str:
    """The first screen's words beside the map (markdown, escaped)."""
    return (
        escaped(f"Multi-head attention in seven steps, on your text in {ctx.where} of {ctx.base.model_name}, "
                f"for head {i} of {h}.")
        + " On the right, what this head ends with: each token's attention weights over the tokens (a row sums to "
        "1). Every matrix below is the one this layer computes (hover for the numbers); change the text, the layer "
        "or the head and the lesson follows. Open a step to see how the weights are made."
    )  # fmt: skip


def row_caption(t: AttentionTrace, it: int) -> str:
    return escaped(f"The row of “{t.tokens[it]}” (token {it}) is outlined in red in every token matrix.")


def opening_of(ctx: Ctx, t: AttentionTrace) -> LessonOpening:
    return lesson_opening(t.pattern.numpy(), ctx.base.tokens.pieces, ctx.base.key_tokens.pieces)


def lesson_steps(ctx: Ctx, t: AttentionTrace, i: int) -> list[Step]:
    """The seven steps for head ``i`` of the layer's trace ``t``."""
    b = ctx.base
    weights = get_plain_weights(ctx.sel) if b.plain else None
    return build_steps(t, i, plain=b.plain, weights=weights, scaled=ctx.config.scaled, wo_words=wo_words(ctx))


def first_map(t: AttentionTrace, steps: list[Step], i: int, rows: slice, it: int | None) -> FirstMap | None:
    """The first screen's map: head ``i``'s attention weights in the drawn ``rows``, row ``it`` outlined."""
    pattern = next((p for step in steps for p in step.panels if p.kind == "weights"), None)
    if pattern is None:
        return None
    shown = window_rows(pattern, rows)
    titled = dataclasses.replace(shown, title=f"Head {i}: attention weights {shown.shape}")
    call = figure_call(titled, FIRST_HEIGHT, FIRST_WIDTH)
    marked = it is not None and shown.row_labels == tuple(t.tokens[rows])
    return FirstMap(call, (it - rows.start, t.tokens[it]) if marked else None)


def first_screen(ctx: Ctx) -> FirstScreen:
    """The Lesson's first screen for a session that chose nothing (the layer's own first head, every row: a short
    text). What the server stores as its first page (serve/record.py)."""
    t = ctx.trace()
    n = len(t.tokens)
    if n > WINDOW_ROWS:
        raise ValueError(f"the first screen is stored for a short text (≤ {WINDOW_ROWS} tokens), not {n}")
    opening = opening_of(ctx, t)
    i = opening.head
    rows = slice(0, n)
    it = opening.marked(rows)
    captions = (escaped(opening.shown(i)), *((row_caption(t, it),) if it is not None else ()))
    return FirstScreen(intro_text(ctx, i, t.n_heads), captions, first_map(t, lesson_steps(ctx, t, i), i, rows, it))

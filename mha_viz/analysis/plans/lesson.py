"""The Lesson's choices as data: the head it opens on and why (analysis.opening's one rule, through
analysis.lesson.default_head), what the caption says about the head drawn, and the query row it marks. The view
(ui/views/lesson.py) draws the steps (analysis.lesson.build_steps). Pure numpy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.lesson import default_head, focus_row


@dataclass(frozen=True)
class LessonOpening:
    head: int  # the layer's own first choice (the opening rule; head 0 without an "it" → "animal" pair)
    why: str
    row: int | None  # the query row marked in every token matrix ("it"), None without one

    def shown(self, i: int) -> str:
        """Why head ``i`` is drawn: the layer's first choice, or the head opened in the session (never a first
        choice named as if it were the head drawn)."""
        if i == self.head:
            return f"Opened first: {self.why}."
        return (
            f"Shown: head {i}, the opened head (chosen here, in another view, or when the model was chosen). This "
            f"layer's own first choice would be {self.why}; pick it above to see it."
        )

    def marked(self, rows: slice) -> int | None:
        """The marked row when it is inside the drawn ``rows`` (a long text's window), else None."""
        return self.row if self.row is not None and rows.start <= self.row < rows.stop else None


def lesson_opening(pattern: np.ndarray, queries: Sequence[str], keys: Sequence[str]) -> LessonOpening:
    """The Lesson's first head of a layer and its marked row. Shapes: pattern [h, n_q, n_k]; queries [n_q] and keys
    [n_k] the readable pieces."""
    head, why = default_head(pattern, queries, keys)
    return LessonOpening(head, why, focus_row(queries))

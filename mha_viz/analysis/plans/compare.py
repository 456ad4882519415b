"""Compare heads' choices as data: head B's first choice, A and B's shared colour scale, and the titles of A, B and
their difference for the rows shown. The view (ui/views/compare.py) draws them. Pure numpy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def second_head(a_head: object, n_heads: int) -> int:
    """Head B's first choice: head 0, or head 1 when A is head 0 (a layer of one head: 0 again)."""
    return 0 if a_head != 0 else min(1, n_heads - 1)


@dataclass(frozen=True)
class ComparePlan:
    top: float  # A and B's one colour scale runs from 0 to this (the larger of their largest weights)
    titles: tuple[str, str]  # A's and B's
    diff_title: str  # B − A
    scale_note: str


def compare_plan(
    pa: np.ndarray, pb: np.ndarray, picks: tuple[tuple[int, int], tuple[int, int]], rows: slice, n_keys: int
) -> ComparePlan:
    """Titles and the shared scale for heads A = picks[0] and B = picks[1] (each (layer, head)), their patterns drawn
    for ``rows`` (all n rows, or a window). Shapes: pa, pb [n, n_keys]."""
    n = int(np.asarray(pa).shape[0])
    top = float(max(np.asarray(pa).max(), np.asarray(pb).max()))
    part = "" if rows.stop - rows.start == n else f"rows {rows.start}–{rows.stop - 1} of "
    (la_a, he_a), (la_b, he_b) = picks
    titles = tuple(f"Layer {la}, head {he} [{part}{n} × {n_keys}]" for la, he in picks)
    diff = f"Difference: (L{la_b} H{he_b}) − (L{la_a} H{he_a}){'' if not part else f' [{part}{n} × {n_keys}]'}"
    note = (
        f"A and B share one colour scale, from 0 to {top:.3g} (the larger of their largest weights), so the same "
        "colour is the same weight in both."
    )
    return ComparePlan(top, (titles[0], titles[1]), diff, note)

"""The one rule for the head everything opens on ("it" → "animal"): the app (its opened layer and head, the Lesson,
Lines), the notebook API (mha_viz.show.found, show.lines) and the example notebook all ask here.

    pair = opening_pair(labels)                  # (query, key): "it" → "animal" (referents.default_pair)
    opening_head(patterns, *pair)                # (layer, head, weight, others' mean, others' max) over every layer
    layer_opening(pattern, labels, key_labels)   # the same rule inside one layer: the head, or None
    opening_choice(patterns, *pair)              # the app's plan: opening_head, and the largest-weight head if not it

The head is the one where the query's weight on the key stands out most from the other queries' weight on that key
(referents.specific_head), not the one with the largest weight: a head where every token looks at "animal"
(MiniLM's layer 5, head 11) says nothing about "it". On MiniLM and the seed sentence: layer 3, head 1. Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.referents import default_pair, focus_head, specific_head


def opening_pair(labels: Sequence[str], key_labels: Sequence[str] | None = None) -> tuple[int, int] | None:
    """(query, key) the rule looks at: referents.default_pair for self-attention (the keys are the queries);
    None when the text has no such pair or the keys are another text's (cross-attention)."""
    if key_labels is not None and list(key_labels) != list(labels):
        return None
    return default_pair(labels)


def opening_head(patterns: np.ndarray, q: int, k: int) -> tuple[int, int, float, float, float] | None:
    """(layer, head, weight, others' mean, others' max) where query ``q``'s weight on key ``k`` stands out most
    (referents.specific_head); None when no head gives ``k`` any weight from ``q`` (a mask hides it).

    Shapes: patterns [L, H, n_q, n_k] (one layer: pattern[None])."""
    found = specific_head(patterns, q, k)
    return found if found[2] > 0 else None


def layer_opening(pattern: np.ndarray, labels: Sequence[str], key_labels: Sequence[str]) -> int | None:
    """The rule inside one layer: the head of ``pattern`` opening_head picks for opening_pair(labels); None when
    the text has no pair or the key is hidden. Shapes: pattern [H, n_q, n_k]; labels [n_q]; key_labels [n_k]."""
    pair = opening_pair(labels, key_labels)
    p = np.asarray(pattern)
    if pair is None or p.ndim != 3 or p.shape[0] == 0:
        return None
    found = opening_head(p[None], *pair)
    return None if found is None else found[1]


@dataclass(frozen=True)
class Opening:
    """The head the app opens on (opening_head) and, where another head gives the key more weight from the query,
    that one with the other queries' least and largest weight on the key there (a head every token looks at)."""

    layer: int
    head: int
    weight: float  # the query's weight on the key in that head
    others: float  # the other queries' mean weight on the key there
    others_max: float
    strongest: tuple[int, int, float, float, float] | None  # (layer, head, weight, others' min, others' max)


def opening_choice(patterns: np.ndarray, q: int, k: int) -> Opening | None:
    """opening_head's head for query ``q`` and key ``k``, with the head of the largest weight (referents.focus_head)
    where that is another one; None when no head gives ``k`` any weight from ``q``. Shapes: patterns [L, H, n_q, n_k]
    (the app passes only the key's column: [L, H, rows, 1] with k = 0)."""
    p = np.asarray(patterns)
    chosen = opening_head(p, q, k)
    if chosen is None:
        return None
    layer, head, weight, others, others_max = chosen
    top = focus_head(p, q, k)
    strongest = None
    if top[:2] != (layer, head):
        rest = [float(p[top[0], top[1], i, k]) for i in range(p.shape[2]) if i != q]  # the same rows
        strongest = (*top, min(rest, default=0.0), max(rest, default=0.0))
    return Opening(layer, head, weight, others, others_max, strongest)

"""Where does it look?'s choices as data: the (query, key) it opens on, the warning when the pair's weights are all
0, the head shown first, the ten top heads and which pill is lit, the titles and the download. The view
(ui/views/where.py) draws them. Pure numpy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.referents import default_pair, focus_head, rank_heads

Head = tuple[int, int, float]  # (layer, head, weight)


def causal_here(model_causal: bool, what_if_causal: bool, part: str) -> bool:
    """Whether key j is visible from query i only for j ≤ i: the model's own causal mask or the what-if's, except in
    cross-attention (every decoder token sees every source token)."""
    return (model_causal or what_if_causal) and part != "cross"


def default_query_key(labels: list[str], key_labels: list[str], causal: bool) -> tuple[int, int, str]:
    """The (query, key) the view opens on: "it" → "animal" (referents.default_pair) for self-attention, else "it"
    (or, under a causal mask, the last token, which sees every key) and "animal" (else the last key). Under a causal
    mask the key is one the query sees (at or before it): else the query becomes the last token, and the note
    (else "") says so."""
    pair = default_pair(labels) if labels == key_labels else None
    last = len(labels) - 1
    q0, k0 = pair if pair else (labels.index("it") if "it" in labels else (last if causal else 0), None)
    k0 = k0 if k0 is not None else (key_labels.index("animal") if "animal" in key_labels else len(key_labels) - 1)
    note = ""
    if causal and (k0 > q0 or (pair is None and "it" not in labels)):
        q0 = last if k0 <= last else q0
        k0 = min(k0, q0)
        note = (
            f"Under the causal mask a token sees only itself and the tokens before it: opened on “{labels[q0]}” "
            f"(token {q0}) → “{key_labels[k0]}” (token {k0}), a key this query can see."
        )
    return q0, k0, note


def chosen(stored: object, link: str | None, options: Sequence[int], default: int) -> int:
    """The value a picker shows: its stored value, else the link's (as text), else ``default``."""
    if stored in options:
        return int(stored)  # type: ignore[call-overload]
    names = [str(o) for o in options]
    return options[names.index(link)] if link in names else default


@dataclass(frozen=True)
class WherePlan:
    warning: str  # why every weight is 0 ("" when some is not)
    drawn: bool  # a map and a ranking (False: every weight 0, no made-up colour scale, no ranking of ties)
    top: tuple[int, int]  # the head shown first: the largest weight
    ranked: tuple[Head, ...]  # the ten largest weights, ties to the lower layer and head
    title: str  # the map's

    def lit(self, shown: tuple[int, int]) -> int | None:
        """The top head's pill lit for the shown head (None: it is not among the ten)."""
        return next((r for r, (la, he, _) in enumerate(self.ranked) if (la, he) == shown), None)


def where_plan(
    weights: np.ndarray, labels: Sequence[str], key_labels: Sequence[str], q: int, k: int, causal: bool
) -> WherePlan:
    """What the view draws for query ``q`` on key ``k`` (``causal``: key j visible from query i iff j ≤ i).
    Shapes: weights [L, H] (every layer and head's weight of q on k)."""
    pair = f"“{key_labels[k]}” (token {k}) from “{labels[q]}” (token {q})"
    warning = ""
    if causal and k > q:
        warning = (f"The causal mask hides {pair}: a token sees only itself and the tokens before it, so every head's "
                   "weight here is 0. Pick a key at or before the query, or a later query.")  # fmt: skip
    elif not np.any(weights):
        warning = f"The model's mask hides “{key_labels[k]}” from “{labels[q]}” in every layer: every weight is 0."
    drawn = bool(np.any(weights))
    top = focus_head(np.asarray(weights)[:, :, None, None], 0, 0)[:2]
    title = f"“{labels[q]}” → “{key_labels[k]}”: weight in every layer × head (click a cell to open it below)"
    return WherePlan(warning, drawn, top, tuple(rank_heads(weights)) if drawn else (), title)


def head_title(head: tuple[int, int], pair: tuple[str, str], weight: float, rows: slice, shape: tuple[int, int]) -> str:
    """The shown head's title: its pattern's size (or the window of its rows) and the pair's weight."""
    (la, he), (n, nk) = head, shape
    what = f"[{n} × {nk}]" if rows.stop - rows.start == n else f"rows {rows.start}–{rows.stop - 1} of [{n} × {nk}]"
    return f"Layer {la}, head {he}: attention weights {what}; “{pair[0]}” → “{pair[1]}” = {weight:.3f}"


def where_rows(weights: np.ndarray) -> list[list]:
    """The download: layer, head, weight; layer by layer."""
    L, H = weights.shape
    return [[la, he, f"{weights[la, he]:.6g}"] for la in range(L) for he in range(H)]

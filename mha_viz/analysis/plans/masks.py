"""Masks' choices as data: what the padded batch is in words, how many positions of the padded sentence are drawn
(its real tokens and a few pads when there is much padding), the titles and the notes under the figure, and the
causal-mask what-if's title. The view (ui/views/masks.py) draws them. Pure (plain values in)."""

from __future__ import annotations

from dataclasses import dataclass

SHOWN_PADS = 8  # padding positions drawn after the shorter sentence's real tokens


def shown_positions(n: int, real: int, pads: int = SHOWN_PADS) -> int:
    """How many of the ``n`` positions are drawn: all, unless the padding is longer than 2 × ``pads`` (then the
    ``real`` tokens and ``pads`` of the padding)."""
    return n if n <= real + 2 * pads else real + pads


@dataclass(frozen=True)
class MasksPlan:
    intro: str  # the padded batch in words
    shown: int  # positions drawn (rows and columns)
    title: str
    notes: tuple[str, ...]  # under the figure, before the metrics
    block: str  # after the metrics: what the real block is


def masks_plan(
    lengths: tuple[int, int], n: int, row: int, where: str, head: int, engine: str | None
) -> MasksPlan:  # fmt: skip
    """The plan of the two sentences' batch (``lengths`` real tokens each, padded to ``n``), drawn for sentence
    ``row`` (the shorter) and ``head``. ``engine``: None for the model's own forward pass, else the name of the
    model (own weights: our engine with a key mask)."""
    real = lengths[row]
    how = "our engine with a key mask (own weights)" if engine is None else f"{engine}, one forward pass"
    intro = (
        f"**Padding mask.** The two sentences ({lengths[0]} and {lengths[1]} tokens) go through as **one batch** "
        f"({how}): the shorter one is padded on the right to {n} positions and the attention mask marks the padding, "
        "so its scores become −∞ before the softmax and padded keys get exactly zero weight"
        + ("." if engine is None else " (the model as it is: the sidebar's what-ifs do not apply to this figure).")
    )
    m = shown_positions(n, real)
    cut = f", first {m} of {n} positions" if m < n else ""
    notes = []
    if m < n:
        notes.append(
            f"Shown: the {real} real tokens and {m - real} of the {n - real} padding positions; the others are the "
            "same (zero weight as keys, unused as queries). The metrics below cover every position."
        )
    if real == n:
        notes.append("Both sentences have the same length: nothing is padded. Change the second sentence.")
    block = (
        f"Rows 0–{real - 1} and columns 0–{real - 1} are the real tokens: they equal the sentence run alone (both "
        "sentences, every head of this layer, to float rounding). The shaded rows are padded queries: the model "
        "computes them, but nothing downstream reads them."
    )
    title = f"Padded batch [{n} × {n}{cut}]: sentence {row + 1}, {where}, head {head}"  # (breaks after ":")
    return MasksPlan(intro, m, title, tuple(notes), block)


def causal_title(n: int, where: str, head: int) -> str:
    return f"What if: causal mask [{n} × {n}], {where}, head {head}"

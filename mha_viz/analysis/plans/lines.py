"""Lines' choices as data: the caption of how lines are drawn, the head it opens on, which heads a link names that
are not heads, which tokens a long text shows (the window), the figure's title and the table of the strongest lines
drawn. The view (ui/views/lines.py) draws them; the limits (threshold, lines, rows, heads) come from figures/lines.py
as arguments. Pure numpy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mha_viz.analysis.opening import layer_opening

ALL = "(all tokens)"  # the focus choice that draws every query's lines


class Lines(Protocol):
    """The lines a figure draws (figures.LineSet). Shapes: head, query, key, weight [m]."""

    head: np.ndarray
    query: np.ndarray
    key: np.ndarray
    weight: np.ndarray


def head_label(i: int) -> str:
    return f"head {i}"


def lines_caption(model_name: str, where: str, cross: bool, threshold: float, segments: int, rows: int) -> str:
    """How the lines are drawn: sides, opacity steps, what is left out and how to pick a focus."""
    sides = "decoder tokens left, source tokens right" if cross else "query tokens left, key tokens right"
    return (
        f"{model_name}, {where}: {sides}. Each line joins a query to a key it attends to; its opacity grows with the "
        f"weight in 8 steps (0–0.125 faintest … 0.875–1 solid). Weights under {threshold:g} are not drawn, nor more "
        f"than {segments:,} lines (the largest are kept), and a text longer than {rows} tokens is shown as a window "
        f"of {rows}. Hover a token for its three largest weights in each head; click a query token on the left (or "
        "pick it below) to draw only its lines."
    )


def opening(pattern: np.ndarray, labels: Sequence[str], key_labels: Sequence[str]) -> int:
    """The head Lines opens on: analysis.opening's rule inside this layer, else head 0.
    Shapes: pattern [h, n_q, n_k]."""
    head = layer_opening(pattern, labels, key_labels)
    return 0 if head is None else head


def link_heads(given: Sequence[str], n_heads: int, default: int, most: int) -> tuple[list[str], list[str]]:
    """A link's heads: those that are not heads of this layer, and what is shown instead (the good ones, at most
    ``most``, else the default head)."""
    names = [head_label(i) for i in range(n_heads)]
    bad = [v for v in given if v not in names]
    return bad, [v for v in given if v in names][:most] or [head_label(default)]


def window(n: int, centre: int, size: int) -> tuple[int, int]:
    """[start, stop) of at most ``size`` positions out of n, centred on ``centre`` where the ends allow."""
    if n <= size:
        return 0, n
    start = min(max(0, centre - size // 2), n - size)
    return start, start + size


def start_picker(n_q: int, focus: int | None, size: int) -> int | None:
    """The largest first query a long text's window can start at, when the view offers that picker (no focus and
    more than ``size`` tokens); else None."""
    return n_q - size if focus is None and n_q > size else None


def windows(
    pattern: np.ndarray, heads: Sequence[int], focus: int | None, start: int, self_attention: bool, size: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """The query and key windows: around the focus, else from ``start``; the keys follow the queries for
    self-attention, else centre on the key the shown queries weigh most. Shapes: pattern [h, n_q, n_k]."""
    nq, nk = int(pattern.shape[1]), int(pattern.shape[2])
    qw = window(nq, focus, size) if focus is not None else (start, start + size) if nq > size else (0, nq)
    if self_attention and nk == nq:  # the same tokens on both sides: the same window
        return qw, qw
    weight_in = np.asarray(pattern)[list(heads), qw[0] : qw[1]].sum((0, 1))  # [n_k]: weight each key receives
    return qw, window(nk, int(np.argmax(weight_in)), size)


def lines_title(where: str, heads: Sequence[int], focus_label: str | None) -> str:
    about = f"“{focus_label}” as the query" if focus_label is not None else "every query"
    return f"{where.capitalize()}, {', '.join(head_label(i) for i in heads)}: {about}"


@dataclass(frozen=True)
class Strongest:
    title: str
    table: dict[str, list]  # query, key, head, value: the heaviest lines first


def strongest(lines: Lines, labels: Sequence[str], key_labels: Sequence[str], value: str, top: int) -> Strongest | None:
    """The ``top`` heaviest lines drawn (ties: the order drawn); None when no line is drawn."""
    order = np.argsort(-np.asarray(lines.weight), kind="stable")[:top]
    if not order.size:
        return None
    table = {
        "query": [labels[int(lines.query[j])] for j in order],
        "key": [key_labels[int(lines.key[j])] for j in order],
        "head": [int(lines.head[j]) for j in order],
        value: [round(float(lines.weight[j]), 3) for j in order],
    }
    return Strongest(f"**The {len(order)} strongest lines drawn**", table)


def line_rows(lines: Lines, labels: Sequence[str], key_labels: Sequence[str]) -> list[list]:
    """The download: one row per line drawn, query, key, head, weight."""
    return [[labels[q], key_labels[k], int(h), f"{float(w):.9g}"]
            for h, q, k, w in zip(lines.head, lines.query, lines.key, lines.weight, strict=True)]  # fmt: skip

"""What Overview and Heads draw at length (issue 38 §3), from plain numbers: whether a text is long, the tile side of
a pooled map and its caption, the zoom window (around the focus token by default, from two ranges or a box drawn
on the pooled map), and the words that say where it sits. No model, no Streamlit."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.config import LONG_GRID_CELLS, LONG_MAP_CELLS, LONG_VIEW_FROM, MAX_ZOOM_SIDE, ZOOM_SIDE


def is_long(n_q: int, n_k: int | None = None) -> bool:
    """Whether a pattern is drawn as pooled exact maps and a zoom (beyond LONG_VIEW_FROM tokens a side)."""
    return max(n_q, n_q if n_k is None else n_k) > LONG_VIEW_FROM


def tile_side(n_q: int, n_k: int, cells: int) -> int:
    """The block side f that leaves at most ``cells`` cells a side (as pooling.pool_factor)."""
    return max(1, math.ceil(max(n_q, n_k) / max(1, cells)))


def map_side(n_q: int, n_k: int) -> int:
    """The zoom's pooled map of the opened head: its tile side."""
    return tile_side(n_q, n_k, LONG_MAP_CELLS)


def grid_side(n_q: int, n_k: int) -> int:
    """The Heads grid's pooled maps: their tile side."""
    return tile_side(n_q, n_k, LONG_GRID_CELLS)


def tile_caption(f: int, value_name: str = "weight") -> str:
    """What one cell of a pooled map is."""
    return f"each cell: the mean {value_name} of a {f}×{f} block of queries × keys"


@dataclass(frozen=True)
class Zoom:
    """A window of query rows [q0, q1) × key columns [k0, k1) of an n_q × n_k pattern."""

    q0: int
    q1: int
    k0: int
    k1: int
    n_q: int
    n_k: int

    @property
    def rows(self) -> slice:
        return slice(self.q0, self.q1)

    @property
    def keys(self) -> slice:
        return slice(self.k0, self.k1)

    @property
    def cells(self) -> int:
        return (self.q1 - self.q0) * (self.k1 - self.k0)


def _span(lo: int, hi: int, n: int, side: int) -> tuple[int, int]:
    """[lo, hi) inside [0, n), at least one and at most ``side`` long (cut at its end, kept at its start)."""
    lo = min(max(0, int(lo)), n - 1)
    hi = min(max(lo + 1, int(hi)), n, lo + side)
    return lo, hi


def _around(center: int, n: int, side: int) -> tuple[int, int]:
    """``side`` positions (fewer if n is shorter) centred on ``center``, moved inside [0, n)."""
    side = min(side, n)
    lo = min(max(0, center - side // 2), n - side)
    return lo, lo + side


def default_zoom(n_q: int, n_k: int, focus: int, side: int = ZOOM_SIDE, causal: bool = False) -> Zoom:
    """The window around the focus token: ``side`` query rows centred on it, and the same positions as keys (its
    neighbourhood, the diagonal); a causal pattern's keys end at the window's last row (no later key has a weight)."""
    q0, q1 = _around(focus, n_q, side)
    if causal and n_k == n_q:
        k1 = q1
        k0 = max(0, k1 - side)
    else:
        k0, k1 = _around(min(focus, n_k - 1), n_k, side)
    return Zoom(q0, q1, k0, k1, n_q, n_k)


def zoom_from_ranges(n_q: int, n_k: int, rows: Sequence[int], keys: Sequence[int], side: int = MAX_ZOOM_SIDE) -> Zoom:
    """A window from two inclusive ranges (first, last) of the sliders, each at most ``side`` long."""
    q0, q1 = _span(min(rows), max(rows) + 1, n_q, side)
    k0, k1 = _span(min(keys), max(keys) + 1, n_k, side)
    return Zoom(q0, q1, k0, k1, n_q, n_k)


def zoom_from_box(n_q: int, n_k: int, xs: Sequence[float], ys: Sequence[float], side: int = MAX_ZOOM_SIDE) -> Zoom:
    """A window from a box drawn on a pooled map whose axes are token positions (x: keys, y: queries): every
    position the box touches, each side at most ``side`` (kept from its first position)."""
    k0, k1 = _span(math.floor(min(xs)), math.ceil(max(xs)) + 1, n_k, side)
    q0, q1 = _span(math.floor(min(ys)), math.ceil(max(ys)) + 1, n_q, side)
    return Zoom(q0, q1, k0, k1, n_q, n_k)


def was_cut(xs: Sequence[float], ys: Sequence[float], zoom: Zoom) -> bool:
    """Whether a box was larger than the window kept from it."""
    return math.ceil(max(xs)) + 1 - math.floor(min(xs)) > zoom.k1 - zoom.k0 or (
        math.ceil(max(ys)) + 1 - math.floor(min(ys)) > zoom.q1 - zoom.q0
    )


def span_words(lo: int, hi: int, n: int) -> str:
    """'tokens 4,000–4,127 of 8,192' for [lo, hi)."""
    return f"tokens {lo:,}–{hi - 1:,} of {n:,}"


def where_words(z: Zoom) -> str:
    """Where a zoom sits, for the text panel."""
    return f"queries: {span_words(z.q0, z.q1, z.n_q)}; keys: {span_words(z.k0, z.k1, z.n_k)}"


def zoom_title(where: str, head: int, z: Zoom, value_name: str = "weight") -> str:
    """The zoom's figure title."""
    return (
        f"{where}, head {head}: exact {value_name}s of queries {z.q0:,}–{z.q1 - 1:,} × keys {z.k0:,}–{z.k1 - 1:,} "
        f"[{z.q1 - z.q0} × {z.k1 - z.k0} of {z.n_q:,} × {z.n_k:,}]"
    )


def excerpt(pieces: Sequence[str], lo: int, hi: int, context: int = 12) -> tuple[str, str, str]:
    """The zoomed tokens [lo, hi) and up to ``context`` tokens either side (before, inside, after), each token's
    text stripped and the tokens joined by single spaces; "…" where the text goes on."""

    def join(part: Sequence[str]) -> str:
        return " ".join(p.strip() for p in part if p.strip())

    first = "… " if lo > context else ""
    last = " …" if hi + context < len(pieces) else ""
    return first + join(pieces[max(0, lo - context) : lo]), join(pieces[lo:hi]), join(pieces[hi : hi + context]) + last


# --- readable at length: whitespace labels, the text as typed, the focus row by blocks -------------------------
TOP_KEYS = 5  # the focus row's keys named under its map (Heads at length)
_WS_MARKS = "␣↵⇥"  # models/tokens.readable's marks for a whitespace token (its only characters)
_RUN = re.compile("([␣↵⇥])\\1{2,}")


def short_label(label: str) -> str:
    """A whitespace token's label, short: a run of three or more of one mark as "␣×19" ("↵␣×22 (7)"); any other
    label unchanged (only a token of nothing but whitespace is drawn with these marks)."""
    body, _, tail = label.partition(" (")
    if not body or body.strip(_WS_MARKS):
        return label
    short = _RUN.sub(lambda m: f"{m.group(1)}×{len(m.group(0))}", body)
    return short + (f" ({tail}" if tail else "")


def short_labels(labels: Sequence[str]) -> list[str]:
    """short_label of each, or the labels unchanged if shortening made two alike (an axis needs them distinct)."""
    out = [short_label(t) for t in labels]
    return out if len(set(out)) == len(set(labels)) else list(labels)


def _flat(s: str) -> str:
    """Text on one line: a line break as " ↵ ", any other run of whitespace as one space."""
    return re.sub(r"[^\S\n]+", " ", re.sub(r"\s*\n\s*", " ↵ ", s))


def text_excerpt(
    text: str, offsets: Sequence[tuple[int, int]], lo: int, hi: int, context: int = 12
) -> tuple[str, str, str]:
    """As excerpt, but the text as typed between the tokens' character offsets (the tokenizer's
    offset_mapping, one (start, end) per token; special tokens (0, 0)): word pieces stay joined ("Surrender")."""
    n = len(offsets)

    def span(a: int, b: int) -> tuple[int, int] | None:
        real = [(s, e) for s, e in offsets[max(0, a) : min(n, b)] if e > s]
        return (real[0][0], real[-1][1]) if real else None

    inside = span(lo, hi)
    if inside is None:
        return "", "", ""
    start = (span(lo - context, lo) or inside)[0]
    end = (span(hi, hi + context) or inside)[1]
    first = "… " if lo > context else ""
    last = " …" if hi + context < n else ""
    return (first + _flat(text[start : inside[0]]).strip(), _flat(text[inside[0] : inside[1]]).strip(),
            _flat(text[inside[1] : end]).strip() + last)  # fmt: skip


def row_blocks(row: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One query's exact row in every head, by blocks of f keys (the last may be partial): each block's largest
    weight, the key that has it and the block's sum. Shapes: row [h, n_k] -> 3 × [h, ceil(n_k / f)]."""
    h, n_k = row.shape
    m = -(-n_k // f)
    padded = np.full((h, m * f), -np.inf, dtype=np.float64)
    padded[:, :n_k] = row
    blocks = padded.reshape(h, m, f)
    arg = blocks.argmax(-1)
    top = np.take_along_axis(blocks, arg[..., None], -1)[..., 0]
    sums = np.where(np.isfinite(blocks), blocks, 0.0).sum(-1)
    return top.astype(np.float32), (arg + np.arange(m) * f).astype(np.int64), sums.astype(np.float32)

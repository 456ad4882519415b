"""A corpus's head statistics as arrays (issue 26 §2): the table `mha-viz corpus` writes (read back and checked),
and the attention to [CLS], [SEP] and punctuation of Clark et al. 2019's Figure 2, per text.

Shapes: every per-head array is [n_layers, n_heads]; Clark scores are [3, n_layers, n_heads] (CLARK_KEYS order).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.roles import SCORE_KEYS, is_punctuation
from mha_viz.config import MAX_STATS_ROWS, SHARE_TOL
from mha_viz.errors import MhaVizError

STATS_COLUMNS = ("layer", "head", "texts", *(c for k in SCORE_KEYS for c in (k, f"{k}_std")), "label", "label_share")
SHARES = frozenset(SCORE_KEYS) - {"entropy"}  # shares of attention: from 0 to 1
CLARK_KEYS = ("cls", "sep", "punct")
CLARK_PAPER = (
    "Clark, Khandelwal, Levy and Manning 2019, “What Does BERT Look At? An Analysis of BERT's Attention” "
    "(Figure 2; BERT-base, about 1,000 Wikipedia segments): attention to [CLS] is high in the early layers; "
    "“over half of BERT's attention in layers 6-10 focuses on [SEP]”; attention to punctuation (periods and "
    "commas) is substantial in the middle and later layers."
)


@dataclass(frozen=True)
class StatsTable:
    """Every head's corpus statistics: each score's mean and population std over the texts, the most frequent
    label and its share, the number of texts. Shapes: means[k], stds[k], shares, texts [L, H]; labels [L, H] str."""

    means: dict[str, np.ndarray]
    stds: dict[str, np.ndarray]
    labels: np.ndarray
    shares: np.ndarray
    texts: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.texts.shape)  # type: ignore[return-value]

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, object]]) -> StatsTable:
        """From Sums.table() rows (or checked CSV rows): one per (layer, head), every head of the grid present."""
        n_layers = max(int(r["layer"]) for r in rows) + 1
        n_heads = max(int(r["head"]) for r in rows) + 1
        grid = lambda: np.full((n_layers, n_heads), np.nan)
        means, stds = {k: grid() for k in SCORE_KEYS}, {k: grid() for k in SCORE_KEYS}
        labels = np.full((n_layers, n_heads), "", dtype=object)
        shares, texts = grid(), np.zeros((n_layers, n_heads), dtype=np.int64)
        for r in rows:
            la, h = int(r["layer"]), int(r["head"])
            for k in SCORE_KEYS:
                means[k][la, h] = float(r[k])
                stds[k][la, h] = float(r[f"{k}_std"])
            labels[la, h] = str(r["label"])
            shares[la, h] = float(r["label_share"])
            texts[la, h] = int(r["texts"])
        return cls(means, stds, labels, shares, texts)


def read_stats(data: bytes, name: str = "the file") -> StatsTable:
    """A head table written by `mha-viz corpus` (CSV), checked: its columns, one row per head of a full layer × head
    grid, whole numbers where they belong, at least one text per head, every score a finite number (shares from 0 to
    1, entropies and stds not negative). A file that fails a
    check raises MhaVizError saying what is wrong and what to do."""
    fix = "Choose a .csv written by `python -m mha_viz corpus --texts FILE --out heads.csv`."
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MhaVizError(f"{name} is not UTF-8 text. {fix}") from None
    reader = csv.DictReader(io.StringIO(text))
    columns = tuple(reader.fieldnames or ())
    missing = [c for c in STATS_COLUMNS if c not in columns]
    if missing:
        shown = ", ".join(missing[:6]) + (" …" if len(missing) > 6 else "")
        raise MhaVizError(f"{name} lacks the column(s) {shown}. {fix}")
    rows: list[dict[str, object]] = []
    for line, raw in enumerate(reader, start=2):
        if len(rows) >= MAX_STATS_ROWS:
            raise MhaVizError(f"{name} has more than {MAX_STATS_ROWS:,} heads. {fix}")
        rows.append(_checked_row(raw, f"{name}, line {line}", fix))
    if not rows:
        raise MhaVizError(f"{name} has no heads in it (a header only). {fix}")
    n_layers = max(int(r["layer"]) for r in rows) + 1  # type: ignore[call-overload]
    n_heads = max(int(r["head"]) for r in rows) + 1  # type: ignore[call-overload]
    seen = {(r["layer"], r["head"]) for r in rows}
    if len(seen) != len(rows) or len(rows) != n_layers * n_heads:
        raise MhaVizError(
            f"{name} should hold every layer × head once ({n_layers} × {n_heads} = {n_layers * n_heads} rows); it "
            f"has {len(rows)} rows for {len(seen)} heads. {fix}"
        )
    return StatsTable.from_rows(rows)


def _checked_row(raw: Mapping[str, str | None], where: str, fix: str) -> dict[str, object]:
    row: dict[str, object] = {}
    for key in ("layer", "head", "texts"):
        value = (raw.get(key) or "").strip()
        if not (value.isascii() and value.isdigit() and len(value) < 10):
            raise MhaVizError(f"{where}: {key} must be a whole number ≥ 0, not {value[:20]!r}. {fix}")
        row[key] = int(value)
    if row["texts"] == 0:  # what a run that scored no text writes: NaN statistics, nothing to draw
        raise MhaVizError(f"{where}: texts = 0: no text was scored for this head, so it has no statistics (every "
                          f"text of that run was skipped). {fix}")  # fmt: skip
    for key in (*SCORE_KEYS, *(f"{k}_std" for k in SCORE_KEYS), "label_share"):
        value = (raw.get(key) or "").strip()
        try:
            number = float(value)
        except ValueError:
            raise MhaVizError(f"{where}: {key} must be a number, not {value[:20]!r}. {fix}") from None
        hi = 1.0 + SHARE_TOL if key in SHARES or key == "label_share" else math.inf
        lo = -SHARE_TOL
        if not (math.isfinite(number) and lo <= number <= hi):
            span = "from 0 to 1" if math.isfinite(hi) else "≥ 0"
            raise MhaVizError(f"{where}: {key} = {value[:20]} is out of range (it must be {span}). {fix}")
        row[key] = min(max(number, 0.0), 1.0) if math.isfinite(hi) else max(number, 0.0)
    row["label"] = (raw.get("label") or "").strip()[:40]
    return row


def clark_targets(special: Sequence[bool], pieces: Sequence[str]) -> tuple[int, int | None, np.ndarray]:
    """Where a text's [CLS], [SEP] and punctuation are: the first and last special tokens (a text with no special
    token: position 0 stands in for [CLS] and there is no [SEP]); punctuation = punctuation-only tokens that are
    not special. Shapes: special, pieces [n] -> (cls, sep or None, punct [n] bool)."""
    sp = [i for i, s in enumerate(special) if s]
    cls_pos = sp[0] if sp else 0
    sep_pos = sp[-1] if len(sp) >= 2 else None
    punct = np.asarray([is_punctuation(p) and not s for p, s in zip(pieces, special, strict=True)], dtype=bool)
    return cls_pos, sep_pos, punct


def clark_scores(special: Sequence[bool], pieces: Sequence[str], patterns: np.ndarray) -> np.ndarray:
    """One text's attention to [CLS], [SEP] and punctuation (CLARK_KEYS) per head: the weight each query token puts
    on them, averaged over every query token (NaN for [SEP] when the text has none).
    Shapes: patterns [L, H, q, k] (self-attention, q == k) -> [3, L, H] float64."""
    cls_pos, sep_pos, punct = clark_targets(special, pieces)
    p = np.asarray(patterns)
    out = np.full((3, *p.shape[:2]), np.nan)
    out[0] = p[..., cls_pos].mean(-1, dtype=np.float64)
    if sep_pos is not None:
        out[1] = p[..., sep_pos].mean(-1, dtype=np.float64)
    out[2] = p[..., punct].sum(-1, dtype=np.float64).mean(-1) if punct.any() else 0.0
    return out

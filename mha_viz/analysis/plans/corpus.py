"""Corpus's choices as data: whether the scoring starts by itself or is refused, the caption of what was scored, the
three maps (values, titles, colour tops), the heads of highest mean with their most typical texts, the label key
beside the stability map, Clark et al.'s Figure 2 (series, title, which note) and the downloads' rows. The view
(ui/views/corpus.py) draws them. Pure numpy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.corpus_stats import StatsTable
from mha_viz.analysis.roles import SCORE_KEYS

STABLE_SHARE = 0.9  # a head "keeps its label" on at least this share of the texts (the label key's count)


def starts_by_itself(n_texts: int, n_heads: int, auto_cells: int) -> bool:
    """Whether the scoring starts without a button: texts × heads up to ``auto_cells``."""
    return n_texts * n_heads <= auto_cells


def refusal(n_texts: int, model_name: str, secs: float, limit: float | None) -> str:
    """Why a corpus is refused on this server ("" when it is not: no limit, or within it)."""
    if limit is None or secs <= limit:
        return ""
    return (f"Scoring {n_texts:,} texts on {model_name} would take about {secs:,.0f} s; the limit per request on this "
            f"server is {limit:,.0f} s. Use fewer texts (Texts used) or a smaller model.")  # fmt: skip


def caption(model_name: str, source: str | None, n_texts: int, tokens: int, skipped: Mapping[str, int]) -> str:
    """What was scored (``source`` None: a stats file, whose model is not recorded)."""
    if source is None:
        return ("From the stats file: its model is not recorded in the file; a click opens the head in the sidebar's "
                f"model ({model_name}) on the page's text.")  # fmt: skip
    left_out = ", ".join(f"{n} {why}" for why, n in skipped.items() if n)
    return (f"{n_texts:,} texts of {source} scored on {model_name} ({tokens:,} tokens)"
            + (f"; skipped: {left_out}" if left_out else "") + ". Weights as the model computes them (the sidebar's "
            "what-ifs and hidden tokens do not apply here).")  # fmt: skip


@dataclass(frozen=True)
class CorpusMap:
    values: np.ndarray  # [L, H]
    title: str
    name: str  # the value's name in the hover
    labels: np.ndarray | None  # [L, H] labels shown in the hover (the stability map)
    top: float | None  # the colour scale's top (None: the values' own)


def corpus_maps(table: StatsTable, score: str) -> tuple[CorpusMap, CorpusMap, CorpusMap]:
    """The mean of ``score``, its spread across texts and the label stability; the scores in [0, 1] (every one but
    entropy) and the shares on a 0–1 scale."""
    return (
        CorpusMap(table.means[score], f"Mean {score} over the texts", f"mean {score}", None,
                  None if score == "entropy" else 1.0),
        CorpusMap(table.stds[score], f"Spread of {score} across texts (std)", f"std {score}", None, None),
        CorpusMap(table.shares, "Label stability: share of texts with the head's label", "label share", table.labels,
                  1.0),
    )  # fmt: skip


def short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def highest(
    table: StatsTable, score: str, typical: np.ndarray, texts: Sequence[str], n: int = 3
) -> list[tuple[str, str]]:
    """The ``n`` heads of highest mean ``score`` (NaN as 0; ties: the lower layer and head) as ("L1 H2 (0.500): ",
    their most typical text, shortened). Shapes: typical [L, H] (an index into ``texts``)."""
    heads = table.shape[1]
    means = table.means[score].ravel()
    flat = np.argsort(-np.nan_to_num(means), kind="stable")[:n]
    return [(f"L{i // heads} H{i % heads} ({means[i]:.3f}): ", short(texts[typical.ravel()[i]])) for i in flat]


def label_key(table: StatsTable) -> tuple[str, str]:
    """Beside the stability map: each label with its heads and their mean share (most heads first; ties in label
    order), and how many heads keep their label on at least STABLE_SHARE of the texts."""
    counts: dict[str, list[float]] = {}
    for label, share in zip(table.labels.ravel(), table.shares.ravel(), strict=True):
        counts.setdefault(str(label), []).append(float(share))
    lines = []
    for label, v in sorted(counts.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        mean = f" ({np.nanmean(v):.0%})" if not np.all(np.isnan(v)) else ""  # no share known: none said, no NaN
        lines.append(f"{label or '(none)'}: {len(v)}{mean}")
    stable = int(np.sum(np.nan_to_num(table.shares) >= STABLE_SHARE))
    note = (f"{stable} of {table.shares.size} heads keep their label on at least {STABLE_SHARE:.0%} of the texts. "
            "Hover a cell for its label.")  # fmt: skip
    return "\n".join(lines), note


def stats_rows(table: StatsTable) -> list[list]:
    """The download: every head's texts, each score's mean and std, label and share; layer by layer."""
    return [
        [la, h, int(table.texts[la, h]), *(f"{v:.10g}" for k in SCORE_KEYS for v in (
            table.means[k][la, h], table.stds[k][la, h])), table.labels[la, h], f"{table.shares[la, h]:.10g}"]
        for la in range(table.shape[0]) for h in range(table.shape[1])
    ]  # fmt: skip


@dataclass(frozen=True)
class ClarkPlan:
    series: dict[str, np.ndarray]  # line name → [L]
    title: str
    note: str  # how the model's special tokens stand in for [CLS] and [SEP] ("" when they are those)
    rows: list[list]  # the download's


def clark_plan(by_layer: np.ndarray, cls_name: str, sep_name: str | None, model_name: str) -> ClarkPlan:
    """Figure 2 of Clark et al. 2019 for this model. Shapes: by_layer [3, L] (to [CLS], [SEP], punctuation)."""
    sep = sep_name or "[SEP]"
    targets = f"{cls_name}, {sep} and" if sep_name else f"the {cls_name} and"
    if sep_name is None:
        note = (f"{model_name} adds no [CLS] or [SEP]: its first token stands in for [CLS] (most heads park attention "
                "there, the sink), and there is no [SEP] line.")  # fmt: skip
    elif cls_name != "[CLS]" or sep_name != "[SEP]":
        note = f"{cls_name} (the first special token) stands in for [CLS], {sep_name} (the last) for [SEP]."
    else:
        note = ""
    rows = [[la, *(f"{by_layer[j, la]:.6g}" for j in range(3))] for la in range(by_layer.shape[1])]
    series = {cls_name: by_layer[0], sep: by_layer[1], "punctuation": by_layer[2]}
    return ClarkPlan(series, f"{model_name}: attention to {targets} punctuation by layer", note, rows)

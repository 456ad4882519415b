"""Head count's choices as data: why a layer cannot be re-split (grouped-query, or queries and keys that are not
plain linear maps), the counts in words, whether the what-if is said as a note (own weights) or a warning (a trained
model), the grid's columns, the caption and the sweep's series and rows. The view (ui/views/head_count.py) draws them.
Pure (plain values in)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

GRID_WIDE = 16  # up to this many heads, the grid has 4 columns; more: 8


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def refusal(n_heads: int, n_kv_heads: int, plain: bool) -> str:
    """Why this layer's heads cannot be re-split ("" when they can)."""
    if n_kv_heads != n_heads:
        return (f"This layer shares {_plural(n_kv_heads, 'key/value head')} among {_plural(n_heads, 'query head')} "
                "(grouped-query attention), so its heads cannot be re-split into another count.")  # fmt: skip
    if not plain:
        return ("This layer's queries and keys are not plain linear maps of its input X (rotary position embeddings, "
                "QK-norm, or cross-attention from another text), so re-splitting its projections into another head "
                "count has no single meaning here. The other views show what the model computes.")  # fmt: skip
    return ""


@dataclass(frozen=True)
class HeadCountPlan:
    counts_text: str  # the counts that divide the width, in words (markdown)
    warn: bool  # the what-if is said as a warning (a trained model), else as a note (own weights)
    what_if: str


def head_count_plan(
    width: int, divisors: Sequence[int], offered: int, n_heads: int, own: bool, model_name: str
) -> HeadCountPlan:
    """The layer's ``width`` (= heads × d_head) columns re-split into any of ``divisors``; the picker offers counts
    up to ``offered``."""
    text = (f"The layer's {width} query/key/value columns can be grouped into any head count that divides {width}: "
            f"**{', '.join(map(str, divisors))}** (d_k = {width} / heads). This explorer offers the counts up to "
            f"{offered}.")  # fmt: skip
    if own:
        return HeadCountPlan(text, False, "Own weights: the head count is simply a parameter. Xavier initialisation "
                             "draws the same Q|K|V matrix whatever the head count, so re-splitting here equals "
                             "initialising with that many heads.")  # fmt: skip
    return HeadCountPlan(text, True, f"What-if: {model_name} was trained with {_plural(n_heads, 'head')}. "
                         "Re-splitting its projections into another count keeps every weight but changes which "
                         "dimensions are softmaxed together — it is not what the model computes.")  # fmt: skip


def grid_columns(heads: int) -> int:
    return 4 if heads <= GRID_WIDE else 8


def resplit_caption(layer: int, heads: int, width: int) -> str:
    return f"Layer {layer} re-split into {_plural(heads, 'head')} of d_k = {width // heads}."


SERIES = {  # the sweep's series: name on the chart → key of the sweep
    "mean entropy (nats)": "mean_entropy",
    "mean largest weight": "mean_max_weight",
    "output change vs original": "output_change",
}


def sweep_series(sweep: Mapping[str, Sequence[float]]) -> dict[str, Sequence[float]]:
    return {name: sweep[key] for name, key in SERIES.items()}


def sweep_rows(sweep: Mapping[str, Sequence[float]]) -> list[tuple]:
    """The download: heads, mean entropy, mean largest weight, output change; one row per head count."""
    return list(zip(sweep["heads"], *(sweep[key] for key in SERIES.values()), strict=True))

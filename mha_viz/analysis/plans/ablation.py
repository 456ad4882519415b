"""Ablation's choices as data: which (part, layer) heads are zeroed from the layers and heads picked, the caption,
what the effect is shown as (the embedding's cosine for an encoder, the next-token tables for a decoder), the
bars' title and the download's rows. The view (ui/views/ablation.py) draws them. Pure (plain values in)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Zeroed = tuple[tuple[tuple[str, int], tuple[int, ...]], ...]  # ((part, layer), heads) per layer


def zeroed(part: str, layers: Sequence[int], heads: Sequence[int]) -> Zeroed:
    """The heads zeroed: every picked head in every picked layer (in the order picked); none without a head."""
    return tuple(((part, int(la)), tuple(int(h) for h in heads)) for la in layers) if heads else ()


def ablation_caption(part_name: str) -> str:
    return (f"The whole model runs with these heads ({part_name}) zeroed on their way into W^O (for this run only; "
            "the shared weights are untouched).")  # fmt: skip


@dataclass(frozen=True)
class AblationPlan:
    cosine: str | None  # the sentence embedding's cosine to the intact model, as shown (None: a decoder's tables)
    before: dict[str, list[str]]  # the next token, intact: token, p (empty for an encoder)
    after: dict[str, list[str]]  # with the heads ablated
    bars: str  # the per-token change's title
    rows: list[list[str]]  # the download's: token, relative change


def ablation_plan(effect: Mapping) -> AblationPlan:
    """What the effect (studies' ablation: tokens, token_change [n], and embedding_cosine or top_before/top_after
    as (token, p) pairs) is shown as."""
    table = lambda top: {"token": [t for t, _ in top], "p": [f"{p:.3f}" for _, p in top]}
    cosine = f"{effect['embedding_cosine']:.4f}" if "embedding_cosine" in effect else None
    before = table(effect["top_before"]) if cosine is None else {}
    after = table(effect["top_after"]) if cosine is None else {}
    rows = [[label, f"{v:.6g}"] for label, v in zip(effect["tokens"], effect["token_change"], strict=True)]
    return AblationPlan(cosine, before, after, "Last hidden state change per token", rows)

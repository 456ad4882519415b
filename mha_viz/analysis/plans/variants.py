"""Variants' "Share keys and values" choices as data: the groups in words, which heads are drawn before and after,
the note under them, the table of every g and which groupings beat mean-pooling. The view (ui/views/variants.py)
draws them. Pure: it reads a variants study's points (studies.variants.Study, or any object with the same fields)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

MIB = 2**20
REFINED = ("aligned", "orthogonal")  # groupings compared with consecutive mean-pooling


def groups_words(groups: Sequence[Sequence[int]], n_heads: int, kv_heads: int) -> str:
    """The layer's K/V head groups in words, and which K/V head a query head reads when they differ."""
    said = ", ".join("{" + ", ".join(map(str, gr)) + "}" for gr in groups)
    return said + (f" (query head h reads K/V head h // {n_heads // kv_heads})." if kv_heads != n_heads else ".")


def shown_heads(dist: np.ndarray, every: bool, most: int) -> np.ndarray | None:
    """The heads drawn before and after: all (None), or the ``most`` whose patterns changed most, largest first
    (ties: the lower head). Shapes: dist [h]."""
    return None if every else np.argsort(-np.asarray(dist), kind="stable")[:most]


def change_note(dist: np.ndarray, every: bool, most: int) -> str:
    """What the before/after figure shows and how much the heads changed (JS distance). Shapes: dist [h]."""
    which = "" if every else f"The {most} of {len(dist)} heads whose patterns changed most, largest first. "
    return (
        f"{which}JS = the mean Jensen-Shannon distance over query rows between a head's pattern before and after (0: "
        f"unchanged, 1: disjoint). Largest: head {int(dist.argmax())} ({dist.max():.3f}); mean {dist.mean():.3f}."
    )


def share_table(study: Any, kv_heads: int, long_context: int) -> list[dict[str, object]]:
    """One row per g of the mean-pooled curve: the cache on this text and at ``long_context`` tokens, the share saved
    and each grouping's output change at that g."""
    return [
        {"K/V heads": m.kv_heads, "cache (this text)": f"{m.kv_cache_bytes / 1024:,.1f} KiB",
         f"cache ({long_context:,} tokens)": f"{m.long_cache_bytes / MIB:,.0f} MiB",
         "saved": f"{1 - m.kv_heads / kv_heads:.0%}", "change, mean-pooled": f"{m.change:.4g}",
         **{f"change, {gr}": next((f"{a.change:.4g}" for a in study.curve(gr) if a.kv_heads == m.kv_heads), "")
            for gr in REFINED}}
        for m in study.curve("mean")
    ]  # fmt: skip


def better_notes(study: Any) -> list[str]:
    """For each refined grouping, the g (below the model's own) where it changes the output less than mean-pooling."""
    notes = []
    for gr in REFINED:
        better = [m.kv_heads for m in study.curve("mean")[1:] for a in study.curve(gr)
                  if a.kv_heads == m.kv_heads and a.change < m.change]  # fmt: skip
        notes.append(
            f"{gr.capitalize()} grouping changes the output less than consecutive mean-pooling at g = "
            f"{', '.join(map(str, better))}."
            if better
            else f"{gr.capitalize()} grouping does not change the output less than consecutive mean-pooling at any g "
            "on this text."
        )
    return notes

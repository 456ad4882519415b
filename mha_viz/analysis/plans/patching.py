"""Patching's choices as data: the texts and words it opens on, whether the scan starts by itself, the recovered map's
title, the best and top heads in words (K/V heads with the query heads that read them), the attribution estimate
against the exact scan, the download's rows and the heads the position and path patching open on. The view
(ui/views/patching.py) draws them. Pure numpy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.referents import rank_heads

Head = tuple[int, int, float]  # (layer, head, value)


def ranked(values: np.ndarray, k: int) -> list[Head]:
    """The k heads of largest |value| (ties: the lower layer, then the lower head): (layer, head, value), by
    referents.rank_heads (the rule of studies.patching.top_heads too). Shapes: values [L, H]."""
    return rank_heads(values, k)


def input_defaults(
    decoder: bool, page_text: str, other_text: str, ioi: tuple[str, str], answers: tuple[str, str],
    referents: tuple[str, str, str],
) -> tuple[str, str, dict]:  # fmt: skip
    """The clean and corrupted texts and the metric's words the boxes open on: the IOI pair and its answers for a
    decoder; the page's text, ``other_text`` (Two sentences' second text) and the referents for an encoder."""
    if decoder:
        return ioi[0], ioi[1], {"answer": answers[0], "wrong": answers[1]}
    return page_text, other_text, {"focus": referents[0], "referents": (referents[1], referents[2])}


def starts_by_itself(runs: int, tokens: int, auto_runs: int, auto_tokens: int) -> bool:
    """Whether the exact scan starts without a button: few patched runs on a short text."""
    return runs <= auto_runs and tokens <= auto_tokens


def recovered_of(patched: np.ndarray, clean: float, corrupted: float) -> np.ndarray:
    """(patched − corrupted) / (clean − corrupted), 0 where clean = corrupted (nothing to recover). Shapes: [L, G]."""
    gap = clean - corrupted
    return (patched - corrupted) / gap if gap != 0 else np.zeros_like(patched)


@dataclass(frozen=True)
class PatchPlan:
    recovered: np.ndarray  # [L, G]
    best: Head  # the head of largest |recovered|
    unit: str  # "head" or "K/V head"
    group: int  # query heads per unit (1 for query heads)
    title: str  # the map's
    top: tuple[Head, ...]  # by |recovered|, largest first

    def readers(self, unit: int) -> list[int]:
        """The query heads that read ``unit`` (itself for a query head)."""
        return list(range(unit * self.group, (unit + 1) * self.group))


def units(what: str, n_heads: int, n_kv_heads: int) -> tuple[str, int]:
    """What one cell of the map is ("head", or "K/V head" for k or v on a grouped-query model) and how many query
    heads read it."""
    kv = what in ("k", "v") and n_kv_heads != n_heads
    return ("K/V head", n_heads // n_kv_heads) if kv else ("head", 1)


def patch_plan(
    patched: np.ndarray, clean: float, corrupted: float, what: tuple[str, str], heads: tuple[int, int], n_top: int
) -> PatchPlan:
    """The exact scan's plan: ``what`` (out, q, k or v; its name in words) patched on a model of ``heads``
    (query heads, K/V heads). Shapes: patched [L, G]."""
    rec = recovered_of(patched, clean, corrupted)
    unit, group = units(what[0], *heads)
    title = f"Recovered by patching each {unit}'s {what[1]}; click a cell to open the head"
    return PatchPlan(rec, ranked(rec, 1)[0], unit, group, title, tuple(ranked(rec, n_top)))


def top_lines(plan: PatchPlan, patched: np.ndarray, roles: Mapping[int, Sequence[str]]) -> str:
    """The top heads in words, with their role labels on the clean text (``roles``: layer → a label per query head)."""
    lines = []
    for rank, (la, h, v) in enumerate(plan.top, 1):
        heads = plan.readers(h)
        role = f", role{'s' * (len(heads) > 1)} (clean text): {', '.join(roles[la][q] for q in heads)}"
        shared = f" (read by query heads {', '.join(map(str, heads))})" if plan.group > 1 else ""
        lines.append(f"{rank}. layer {la}, {plan.unit} {h}{shared}: recovered {v:+.3f}, patched {patched[la, h]:.4f}"
                     f"{role}")  # fmt: skip
    return f"**Top {len(plan.top)} {plan.unit}s** by |recovered|:\n\n" + "\n".join(lines)


def attribution_note(estimate: np.ndarray, recovered: np.ndarray, unit: str) -> str:
    """The attribution estimate against the exact scan: their correlation (said in words where it has no value: one
    head, or a constant map) and the estimate's top three. Shapes: [L, G] both."""
    a, b = estimate.ravel(), recovered.ravel()
    if a.size > 1 and np.std(a) > 0 and np.std(b) > 0:
        r = f"correlation r = {float(np.corrcoef(a, b)[0, 1]):.3f}"
    else:
        r = "no correlation (" + ("one " + unit if a.size == 1 else "a constant map") + ")"
    return (
        f"Attribution patching (first-order estimate, one forward and one backward pass) against exact patching: "
        f"{r} over the {recovered.size} {unit}s; its top {unit}: "
        + ", ".join(f"L{la} H{h} ({v:+.3f})" for la, h, v in ranked(estimate, 3))
    )


def estimate_text(estimate: np.ndarray, clean: float, corrupted: float, auto_runs: int) -> str:
    """Above ``auto_runs`` patched runs, what the attribution estimate shown first is."""
    return (
        f"**Attribution patching** (a first-order estimate from one forward and one backward pass: Nanda 2023, Syed "
        f"et al. 2023), shown first for more than {auto_runs} patched runs; clean {clean:.4f}, corrupted "
        f"{corrupted:.4f}. Top: " + ", ".join(f"layer {la}, head {h} ({v:+.3f})" for la, h, v in ranked(estimate, 5))
    )


def patch_rows(patched: np.ndarray, recovered: np.ndarray, clean: float, corrupted: float) -> list[list]:
    """The download: layer, head, patched, recovered, clean, corrupted; layer by layer."""
    return [[la, h, *(f"{x:.6g}" for x in (patched[la, h], recovered[la, h], clean, corrupted))]
            for la in range(patched.shape[0]) for h in range(patched.shape[1])]  # fmt: skip


def path_title(into: tuple[str, str], heads: tuple[int, int], sender: tuple[int, int]) -> str:
    """Path patching's map title: through ``into`` (q, k or v; its name) of each later head, from ``sender``."""
    unit, _ = units(into[0], *heads)
    return f"Recovered through each later {unit}'s {into[1]}, from L{sender[0]} H{sender[1]}"


def sender(best: Head, n_layers: int) -> tuple[int, int]:
    """Path patching's first sender: the best head, in a layer with a later one (the last but one at most)."""
    return max(0, min(best[0], n_layers - 2)), best[1]

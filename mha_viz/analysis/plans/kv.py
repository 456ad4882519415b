"""What the KV cache view draws, from the lens's points (studies/kv_lens.Point): the curve per policy, the sharing
points, the chosen point, the table, and the sentences under them. No model, no Streamlit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mha_viz.analysis.kv_policies import POLICY_NAMES
from mha_viz.analysis.plans.variants import MIB

TABLE_COLUMNS = ("policy", "budget", "kv_bytes", "kl", "loss_change", "lost_mass")


def curves(points: Sequence[Any]) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """{policy name: (budgets, cache MiB, loss change)} for the eviction policies, budgets ascending."""
    out: dict[str, tuple[list[float], list[float], list[float]]] = {}
    for key, name in POLICY_NAMES.items():
        mine = sorted((p for p in points if p.policy == key), key=lambda p: p.budget)
        if mine:
            out[name] = ([p.budget for p in mine], [p.kv_bytes / MIB for p in mine], [p.loss_change for p in mine])
    return out


def shares(points: Sequence[Any]) -> list[tuple[str, float, float]]:
    """(name, MiB, loss change) of the K/V sharing points (the seed's GQA/MQA from Variants)."""
    return [(f"{p.policy} (Variants)", p.kv_bytes / MIB, p.loss_change) for p in points if p.policy not in POLICY_NAMES]


def rows(points: Sequence[Any]) -> list[list[object]]:
    """The CLI's CSV columns (TABLE_COLUMNS), one row per point (lost mass empty for K/V sharing: nothing evicted)."""
    return [[p.policy, f"{p.budget:.6g}", p.kv_bytes, f"{p.kl:.6g}", f"{p.loss_change:.6g}",
             "" if np.isnan(p.lost_mass) else f"{p.lost_mass:.6g}"] for p in points]  # fmt: skip


def best_at(points: Sequence[Any], budget: float) -> str:
    """Which policy loses least at ``budget`` (a sentence; empty when no point has it)."""
    here = [p for p in points if p.policy in POLICY_NAMES and abs(p.budget - budget) < 1e-9]
    if not here:
        return ""
    ranked = sorted(here, key=lambda p: p.loss_change)
    words = ", ".join(f"{POLICY_NAMES[p.policy].split(' (')[0]} {p.loss_change:+.3f}" for p in ranked)
    return f"At {budget:.0%} of the prefix kept per K/V head, from least to most loss: {words} nats."


def top_heads(values: np.ndarray, k: int = 5, word: str = "head") -> str:
    """The ``k`` largest entries of a layer × head map as 'L3 head 2 (0.41)'. Shapes: values [L, H]."""
    order = np.argsort(-values, axis=None, kind="stable")[:k]
    H = values.shape[1]
    return ", ".join(f"L{i // H} {word} {i % H} ({values.flat[i]:.3g})" for i in order)

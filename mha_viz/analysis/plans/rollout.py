"""Rollout's choices as data: whether a layer picker is offered and the layer it opens on (the last; a layer left
from a model with more layers is brought back into range), the figure's title and the download. The view
(ui/views/rollout.py) draws them. Pure numpy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RolloutPlan:
    picker: bool  # a layer picker is offered (more than one layer)
    default: int  # the layer it opens on: the last
    reset: int | None  # the layer the picker's stored value becomes (None: it stays: in range, or none stored)


def rollout_plan(n_layers: int, stored: object) -> RolloutPlan:
    """The layer picker for ``n_layers`` layers; ``stored``: the picker's value left from before (None: none)."""
    last = n_layers - 1
    beyond = isinstance(stored, int) and not isinstance(stored, bool) and stored > last
    return RolloutPlan(n_layers > 1, last, last if beyond else None)


def rollout_title(upto: int) -> str:
    return f"Rollout through layers 0–{upto}"


def rollout_arrays(labels: Sequence[str], roll: np.ndarray) -> dict[str, np.ndarray]:
    """The download: the tokens and every layer's rollout. Shapes: roll [L, n, n]."""
    return {"tokens": np.asarray(labels, dtype=str), "rollout": roll.astype(np.float32)}

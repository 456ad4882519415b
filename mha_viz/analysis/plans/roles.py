"""Head roles' choices as data: the layer × head grids of labels and scores the map colours, how many heads carry
each label, the table's columns and the download's rows. The view (ui/views/roles.py) draws them. Pure numpy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.roles import SCORE_KEYS

ROLE_COLUMNS = ("layer", "head", "label", *SCORE_KEYS)


@dataclass(frozen=True)
class RolesPlan:
    labels: np.ndarray  # [L, H] the role label of each head ("" for a head the rows leave out)
    scores: dict[str, np.ndarray]  # score name → [L, H]
    title: str
    counts: str  # "Heads per label: ..." in label order
    table: dict[str, list]  # column → values, one per row
    rows: list[list]  # the download's, numbers as text


def roles_plan(rows: Sequence[Mapping], model_name: str) -> RolesPlan:
    """The plan of ``rows`` (one dict per head: layer, head, label and every score in SCORE_KEYS)."""
    L = max(r["layer"] for r in rows) + 1
    H = max(r["head"] for r in rows) + 1
    labels = np.full((L, H), "", dtype=object)
    scores = {k: np.zeros((L, H)) for k in SCORE_KEYS}
    counts: dict[str, int] = {}
    for r in rows:
        labels[r["layer"], r["head"]] = r["label"]
        counts[r["label"]] = counts.get(r["label"], 0) + 1
        for k in SCORE_KEYS:
            scores[k][r["layer"], r["head"]] = r[k]
    said = "Heads per label: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    table = {c: [r[c] for r in rows] for c in ROLE_COLUMNS}
    body = [[r[c] if isinstance(r[c], str | int) else f"{r[c]:.6g}" for c in ROLE_COLUMNS] for r in rows]
    return RolesPlan(labels, scores, f"{model_name}: role of every layer × head", said, table, body)

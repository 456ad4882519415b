"""A corpus run's numbers and files (studies/corpus.py re-exports all of it): the running sums per head that two
batches add up in (Sums, added), the head table they give (COLUMNS, write_table: CSV or Parquet), and the checkpoint
beside the output that --resume goes on from.

Shapes: sums are [n_scores, n_layers, n_heads] float64; counts [n_layers, n_heads] int64.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

from mha_viz.analysis import csv_cells
from mha_viz.analysis.roles import SCORE_KEYS
from mha_viz.errors import MhaVizError
from mha_viz.studies.corpus_texts import SKIP_REASONS


@dataclass
class Sums:
    """Running sums for every head; two Sums over disjoint texts add up (``merge``) to the Sums of both."""

    total: np.ndarray  # [n_scores, L, H] float64: Σ score over texts
    squares: np.ndarray  # [n_scores, L, H] float64: Σ score²
    count: np.ndarray  # [L, H] int64: texts scored
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # label -> [L, H] int64: texts that gave it
    tokens: int = 0
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))
    inputs: int = 0  # inputs consumed (scored or skipped): where a resumed run starts

    @classmethod
    def empty(cls, n_layers: int, n_heads: int) -> Sums:
        shape = (len(SCORE_KEYS), n_layers, n_heads)
        return cls(np.zeros(shape), np.zeros(shape), np.zeros(shape[1:], dtype=np.int64))

    @property
    def texts(self) -> int:
        return int(self.count.max()) if self.count.size else 0

    def add(self, rows: list[dict], n_tokens: int) -> None:
        """One text's roles table (studies.roles_table rows: layer, head, the scores, label)."""
        for row in rows:
            layer, head = int(row["layer"]), int(row["head"])
            values = np.asarray([float(row[k]) for k in SCORE_KEYS])  # [n_scores]
            self.total[:, layer, head] += values
            self.squares[:, layer, head] += values * values
            self.count[layer, head] += 1
            label = str(row["label"])
            if label not in self.labels:
                self.labels[label] = np.zeros_like(self.count)
            self.labels[label][layer, head] += 1
        self.tokens += int(n_tokens)
        self.inputs += 1

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.inputs += 1

    def merge(self, other: Sums) -> None:
        """Add ``other`` (partial sums over other texts) into these."""
        self.total += other.total
        self.squares += other.squares
        self.count += other.count
        for label, n in other.labels.items():
            self.labels[label] = self.labels.get(label, np.zeros_like(self.count)) + n
        self.tokens += other.tokens
        for reason, n in other.skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + n
        self.inputs += other.inputs

    def to_json(self) -> dict:
        return {
            "total": self.total.tolist(), "squares": self.squares.tolist(), "count": self.count.tolist(),
            "labels": {k: v.tolist() for k, v in self.labels.items()}, "tokens": self.tokens,
            "skipped": self.skipped, "inputs": self.inputs,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> Sums:
        return cls(
            np.asarray(data["total"], dtype=np.float64), np.asarray(data["squares"], dtype=np.float64),
            np.asarray(data["count"], dtype=np.int64),
            {k: np.asarray(v, dtype=np.int64) for k, v in data["labels"].items()},
            int(data["tokens"]), {k: int(v) for k, v in data["skipped"].items()}, int(data["inputs"]),
        )  # fmt: skip

    def table(self) -> list[dict]:
        """One row per head: layer, head, texts, each score's mean and population standard deviation over the
        texts (``<score>_std``), the most frequent label and its share of the texts."""
        rows = []
        n_layers, n_heads = self.count.shape
        for layer in range(n_layers):
            for head in range(n_heads):
                n = int(self.count[layer, head])
                row: dict[str, object] = {"layer": layer, "head": head, "texts": n}
                for i, key in enumerate(SCORE_KEYS):
                    mean = self.total[i, layer, head] / n if n else math.nan
                    var = self.squares[i, layer, head] / n - mean * mean if n else math.nan
                    row[key] = float(mean)
                    row[f"{key}_std"] = float(math.sqrt(max(var, 0.0))) if n else math.nan
                counts = {label: int(c[layer, head]) for label, c in self.labels.items()}
                label = max(sorted(counts), key=counts.get) if n else ""
                row["label"] = label
                row["label_share"] = counts[label] / n if n else math.nan
                rows.append(row)
        return rows


COLUMNS = ("layer", "head", "texts", *(c for k in SCORE_KEYS for c in (k, f"{k}_std")), "label", "label_share")


# --- scoring -------------------------------------------------------------------------------------------------


# --- checkpoints ----------------------------------------------------------------------------------------------
def checkpoint_path(out: str) -> str:
    return out + ".partial.json"


def save_checkpoint(out: str, sums: Sums, meta: dict) -> None:
    """The sums so far and what they are of, beside the output (written whole, then renamed: never half)."""
    path = checkpoint_path(out)
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, "sums": sums.to_json()}, fh)
    os.replace(path + ".tmp", path)


def load_checkpoint(out: str, meta: dict) -> Sums | None:
    """The checkpointed sums of the same run (same texts file, model, part), or None."""
    path = checkpoint_path(out)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if data.get("meta") != meta:
        raise MhaVizError(f"{path} is a checkpoint of another run ({data.get('meta')}); remove it or drop --resume")
    return Sums.from_json(data["sums"])


# --- writing the table ----------------------------------------------------------------------------------------
def write_table(path: str, rows: list[dict]) -> None:
    """The head table as CSV, or Parquet (pyarrow) for a .parquet path."""
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
        return
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        writer.writeheader()
        for row in rows:
            cells = {k: (f"{v:.10g}" if isinstance(v, float) else v) for k, v in row.items()}
            writer.writerow(csv_cells.safe_dict(cells))


def added(sums: Sums | None, partial: Sums) -> Sums:
    """``partial`` added to ``sums`` (None: nothing yet, the partial is the start)."""
    if sums is None:  # a copy: a partial from Ray holds read-only arrays of its object store
        sums = Sums.empty(*partial.count.shape)
    sums.merge(partial)
    return sums

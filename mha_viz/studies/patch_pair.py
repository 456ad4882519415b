"""What activation patching measures and on what (studies/patching.py re-exports it): the Metric of a run (a logit
difference at the last position, or a cosine difference at the last layer) and the Pair of a clean and a corrupted
text with the clean run's activations (Sources) in the layouts a Replace puts back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha_viz.models.load import LoadedModel
from mha_viz.models.tokens import Tokens
from mha_viz.pipeline.door import ModelRun

Sources = dict[tuple[int, str], torch.Tensor]  # (layer, what) -> the clean run's values


@dataclass(frozen=True, eq=False)
class Metric:
    """What is measured on a run: a logit difference (tokens answer, wrong) or a cosine difference (positions
    focus, referent 1, referent 2)."""

    kind: str  # "logit" | "cosine"
    ids: tuple[int, int] = (0, 0)  # answer, wrong token ids
    positions: tuple[int, int, int] = (0, 0, 0)  # focus, referent 1, referent 2
    names: tuple[str, ...] = ()  # what the user named: (answer, wrong) or (focus, referent 1, referent 2)

    def __call__(self, run: ModelRun) -> np.ndarray:
        """The metric of each batch item. Shapes: run.logits [b, pos, vocab] or run.hidden [b, pos, d]; returns [b]."""
        return self.value(run.logits, run.hidden).numpy()

    def value(self, logits: torch.Tensor | None, hidden: torch.Tensor) -> torch.Tensor:
        """The metric as a tensor (differentiable). Shapes: logits [b, pos, vocab]; hidden [b, pos, d]; returns [b]."""
        if self.kind == "logit":
            last = logits[:, -1].double()  # [b, vocab]
            return last[:, self.ids[0]] - last[:, self.ids[1]]
        h = hidden.double()  # [b, pos, d]
        f, r1, r2 = (h[:, p] for p in self.positions)  # [b, d] each
        cos = torch.nn.functional.cosine_similarity
        return cos(f, r1, dim=-1) - cos(f, r2, dim=-1)

    def describe(self) -> str:
        if self.kind == "logit":
            a, w = (repr(n) for n in self.names)
            return f"logit({a}) − logit({w}) at the last position"
        f, r1, r2 = self.names
        return f"cos(h_{f}, h_{r1}) − cos(h_{f}, h_{r2}) at the last layer"


@dataclass(frozen=True, eq=False)
class Pair:
    """A clean and a corrupted text of the same token length, the metric, and the clean run's activations.

    Shapes: clean_ids, corrupt_ids [1, pos]; sources[(layer, what)]: "out" [1, pos, n_heads, d_head], "q"
    [1, n_heads, pos, d_head], "k"/"v" [1, n_kv_heads, pos, d_head] (the layouts a Replace takes).
    """

    lm: LoadedModel
    part: str
    tokens: Tokens  # the corrupted text's
    clean_ids: torch.Tensor
    corrupt_ids: torch.Tensor
    metric: Metric
    clean: float
    corrupted: float
    sources: Sources

    @property
    def n_layers(self) -> int:
        return self.lm.n_layers(self.part)

    def recovered(self, patched: np.ndarray) -> np.ndarray:
        """(patched − corrupted) / (clean − corrupted)."""
        return (np.asarray(patched) - self.corrupted) / (self.clean - self.corrupted)

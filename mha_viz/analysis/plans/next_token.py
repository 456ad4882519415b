"""Next token's choices as data: the target tokens' names, the logit lens table, and the direct logit attribution's
parts, notes and top heads for one target. The view (ui/views/next_token.py) draws them. Pure: it reads the numbers of
a readout (studies.logits.Readout, or any object with the same fields), no model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NORM_WORDS = {
    "RMSNorm": "RMSNorm: γ ⊙ x / rms(r)",
    "LayerNorm": "LayerNorm: γ ⊙ (x − mean x) / σ(r), with the bias β counted as a separate term",
    "none": "this model has no final norm: the LM head reads the stream directly",
}
DLA_TOP = 5  # heads listed


def target_names(labels: Sequence[str], probs: Sequence[float]) -> list[str]:
    """How the target picker (and the link) names each of the top next tokens."""
    return [f"{label} (p = {p:.3f})" for label, p in zip(labels, probs, strict=True)]


def lens_table(top_labels: Sequence[Sequence[str]], top_probs: np.ndarray, final: np.ndarray, first: str) -> dict:
    """The logit lens at one position as table columns: per layer its top tokens with their probabilities, and the
    probability of the model's own first choice ``first``. Shapes: top_probs [L, k]; final [L]."""
    L, k = np.asarray(top_probs).shape
    return {
        "layer": list(range(L)),
        **{f"#{j + 1}": [f"{top_labels[la][j]} ({top_probs[la, j]:.3f})" for la in range(L)] for j in range(k)},
        f"p(“{first}”)": [f"{p:.3f}" for p in final],
    }


@dataclass(frozen=True)
class DlaPlan:
    """What the direct logit attribution to one target token shows. Shapes: heads [L, H]."""

    heads: np.ndarray
    title: str
    caption: str
    indirect: bool  # a norm sits between W^O and the stream: the numbers are not the heads' direct effect
    parts: tuple[tuple[str, float], ...]  # (part, logit), summing to total
    total: float
    model: float  # the model's own logit
    mismatch: bool  # the parts miss the model's logit: it changes logits after the LM head
    top: tuple[tuple[int, int, float], ...]  # (layer, head, logit), the largest DLA_TOP

    @property
    def table(self) -> dict[str, list[str]]:
        return {"part": [*(p for p, _ in self.parts), "sum", "the model's own logit"],
                "logit": [f"{v:.4f}" for v in (*(v for _, v in self.parts), self.total, self.model)]}  # fmt: skip


def dla_plan(r: Any, t: int, after: str) -> DlaPlan:
    """The attribution to the readout's target ``t`` at the token after ``after``: the [L, H] map, its title and
    caption (the final norm linearised at the actual residual), the parts that add up to the logit and the notes."""
    heads = np.asarray(r.heads[t])  # [L, H]
    target = r.target_labels[t]
    caption = (
        f"Each head's output after W^O at “{after}”, read by the LM head row of “{target}” through the final norm "
        f"linearised at the actual final residual r ({NORM_WORDS[r.norm_kind]}; the divisor is fixed at its value "
        f"for r, {r.scale:.4g}, so the parts add up). Positive values raise the logit, negative values lower it."
    )
    parts = (
        ("all heads", float(heads.sum())), ("W^O biases", float(np.asarray(r.biases[t]).sum())),
        ("embeddings", float(r.embed[t])), ("MLPs and the rest", float(r.rest[t])),
        ("norm bias β and LM head bias", float(r.const[t])),
    )  # fmt: skip
    total, model = float(r.total[t]), float(r.model_logit[t])
    return DlaPlan(
        heads, f"Direct logit attribution to “{target}” after “{after}”", caption, not r.direct, parts, total, model,
        abs(total - model) > 1e-3 * (1 + abs(model)), tuple(r.top_heads(t, DLA_TOP)),
    )  # fmt: skip

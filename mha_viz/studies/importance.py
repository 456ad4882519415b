"""Head importance and the pruning curve (after Michel et al. 2019, "Are Sixteen Heads Really Better than
One?"), measured by ablation: a head is removed by zeroing its slice of the attention output on its way
into W^O, for one forward pass (as the Ablation view does; the shared model is never changed).

The output measure (one number per text, averaged over the texts):
- encoders: 1 − cosine between the sentence embeddings with and without the heads (mean-pooled over all
  tokens of the text, L2-normalised: sentence-transformers' pooling for MiniLM);
- models with an LM head: the increase of the mean next-token loss over the text (nats; for
  encoder-decoders, over the decoder's text).

Importance of a head: the measure when that head alone is removed (for decoders it can be negative: removing
the head lowers the loss on this text). Pruning curve: heads removed one after another in a FIXED order, the
smallest |importance| first (the heads whose removal alone changes the output least; not recomputed after
each removal), the measure after each step; against random orders as the baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import Ablate, Intervention
from mha_viz.pipeline.road import encode
from mha_viz.selection import Selection
from mha_viz.trace import MhaVizError

Progress = Callable[[float, str], None]
Head = tuple[int, int]  # (layer, head)
CURVE_POINTS = 80  # at most this many points per curve (every step for smaller models)
RANDOM_SEEDS = (0, 1, 2)  # the random orders a pruning curve is compared with


def measure_name(lm: LoadedModel) -> str:
    return (
        "increase of the mean next-token loss (nats)"
        if lm.causal_lm
        else "1 − cosine of the sentence embedding (mean-pooled, L2-normalised)"
    )


def measure_short(lm: LoadedModel) -> str:
    """The measure's name for an axis."""
    return "Δ mean loss (nats)" if lm.causal_lm else "1 − cosine"


@dataclass(frozen=True, eq=False)
class _Text:
    ids: torch.Tensor  # [1, pos]
    dec: torch.Tensor | None  # [1, target_pos]
    reference: torch.Tensor  # the intact sentence embedding [d] or mean loss []


def _loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy. Shapes: logits [1, pos, vocab], ids [1, pos]."""
    if ids.shape[1] < 2:
        raise MhaVizError("the next-token loss needs a text of at least two tokens")
    return torch.nn.functional.cross_entropy(logits[0, :-1].double(), ids[0, 1:].to(logits.device))


def _embedding(hidden: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(hidden[0].double().mean(0), dim=0)  # [pos, d] -> [d]


class Scorer:
    """The output measure of ``lm`` on fixed texts, for any set of removed heads of one attention part."""

    def __init__(self, lm: LoadedModel, texts: Sequence[str], part: str | None = None, target: str | None = None):
        if not texts:
            raise MhaVizError("give at least one text")
        self.lm, self.part = lm, lm.part(part)
        self.texts = [self._prepare(t, target) for t in texts]

    @classmethod
    def of(cls, lm: LoadedModel, sel: Selection, texts: Sequence[str] | None = None) -> Scorer:
        """The measure on the selection's text (``texts``: these instead, averaged, like the CLI's repeated --text),
        of its part, with its decoder text."""
        return cls(lm, list(texts) if texts else [sel.text], sel.part, sel.target)

    def _prepare(self, text: str, target: str | None) -> _Text:
        tokens, target_tokens = encode(self.lm, text, target)
        ids = torch.tensor([tokens.ids])
        dec = None if target_tokens is None else torch.tensor([target_tokens.ids])
        out = pipeline.run(self.lm, ids, decoder_ids=dec, record=False)
        return _Text(ids, dec, self._value(out, ids if dec is None else dec))

    def _value(self, out, ids: torch.Tensor) -> torch.Tensor:
        return _loss(out.logits, ids) if self.lm.causal_lm else _embedding(out.hidden)

    def score(self, removed: Sequence[Head]) -> float:
        """The measure with ``removed`` heads ablated (0 for none), averaged over the texts."""
        heads: dict[int, list[int]] = {}
        for layer, head in removed:
            heads.setdefault(int(layer), []).append(int(head))
        if not heads:
            return 0.0
        return self.change(*(Ablate(self.part, la, tuple(hs)) for la, hs in heads.items()))

    def change(self, *interventions: Intervention, what: str = "with these heads removed", **plan: object) -> float:
        """The measure of passes run with ``interventions`` (pipeline.run; ``plan``: run_model's older keywords
        replace=, share=, ...), averaged over the texts."""
        total = 0.0
        for t in self.texts:
            out = pipeline.run(self.lm, t.ids, *interventions, decoder_ids=t.dec, record=False, **plan)
            value = self._value(out, t.ids if t.dec is None else t.dec)
            total += float(value - t.reference) if self.lm.causal_lm else 1.0 - float(value @ t.reference)
        result = total / len(self.texts)
        if not np.isfinite(result):
            raise MhaVizError(f"the model's output was not a finite number {what}")
        return result

    @property
    def heads(self) -> list[Head]:
        return [(la, h) for la in range(self.lm.n_layers(self.part)) for h in range(self.lm.n_heads)]


def head_importance(scorer: Scorer, progress: Progress | None = None) -> np.ndarray:
    """Every head's importance: the measure with that head alone removed. Shapes: returns [L, H]."""
    heads = scorer.heads
    out = np.zeros((scorer.lm.n_layers(scorer.part), scorer.lm.n_heads))
    for i, (la, h) in enumerate(heads):
        if progress:
            progress(i / len(heads), f"Removing layer {la}, head {h} ({i + 1} of {len(heads)})")
        out[la, h] = scorer.score([(la, h)])
    return out


def pruning_order(importance: np.ndarray) -> list[Head]:
    """Smallest |importance| first (ties: lower layer, then lower head). Shapes: importance [L, H].

    By magnitude, not sign: on SmolLM2 and the seed sentence 132 of 270 heads lower the loss when removed
    alone, and removing those first (signed order) drove the loss up faster than a random order."""
    L, H = importance.shape
    flat = sorted(range(L * H), key=lambda i: (abs(importance.flat[i]), i))
    return [(i // H, i % H) for i in flat]


def curve_steps(n_heads: int, points: int = CURVE_POINTS) -> list[int]:
    """How many heads are removed at each point of a curve: 0 … n_heads, every step when that is few."""
    if n_heads + 1 <= points:
        return list(range(n_heads + 1))
    return sorted({round(x) for x in np.linspace(0, n_heads, points)})


def pruning_curve(
    scorer: Scorer, order: Sequence[Head], steps: Sequence[int], progress: Progress | None = None, what: str = ""
) -> np.ndarray:
    """The measure after removing the first k heads of ``order``, for each k in ``steps``. Shapes: [len(steps)]."""
    values = []
    for i, k in enumerate(steps):
        if progress:
            progress(i / len(steps), f"{what}{k} of {len(order)} heads removed")
        values.append(scorer.score(order[:k]))
    return np.asarray(values)


def pruning_curves(scorer: Scorer, importance: np.ndarray, progress: Progress | None = None) -> dict[str, np.ndarray]:
    """The pruning curve (heads removed least important first, pruning_order) against RANDOM_SEEDS random orders,
    at curve_steps: {"steps" [k], "by_importance" [k], "random" [r, k]}; the one definition the view and the CLI
    use. Shapes: importance [L, H]."""
    order = pruning_order(importance)
    steps = curve_steps(len(order))
    orders = [order, *random_orders(scorer.heads, RANDOM_SEEDS)]
    runs = []
    for i, o in enumerate(orders):
        what = "least important first: " if i == 0 else f"random order {i} of {len(orders) - 1}: "
        part_progress = None if progress is None else (lambda f, s, i=i: progress((i + f) / len(orders), s))
        runs.append(pruning_curve(scorer, o, steps, part_progress, what))
    return {"steps": np.asarray(steps), "by_importance": runs[0], "random": np.stack(runs[1:])}


def random_orders(heads: Sequence[Head], seeds: Sequence[int]) -> list[list[Head]]:
    """Random removal orders, one per seed (numpy's default generator)."""
    out = []
    for s in seeds:
        perm = np.random.default_rng(s).permutation(len(heads))
        out.append([heads[int(i)] for i in perm])
    return out

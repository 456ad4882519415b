"""Induction heads' choices as data: why a model cannot run the experiment, the length it opens on, the caption of
the sequence, the top heads, the two copies' mean losses and the download's rows. The view (ui/views/induction.py)
draws them. Pure numpy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LISTED_HEADS = 5  # top heads listed, each with an Open button


def refusal(own: bool, decoder: bool, encoder_decoder: bool, model_name: str) -> str:
    """Why the experiment cannot run on this model ("" when it can: a decoder, a causal language model)."""
    if own:
        return "The induction experiment needs a decoder (a causal language model), e.g. the bundled SmolLM2."
    if decoder:
        return ""
    kind = "an encoder-decoder" if encoder_decoder else "an encoder"
    return (f"The induction experiment needs a decoder (a causal language model such as the bundled SmolLM2); "
            f"{model_name} is {kind} model.")  # fmt: skip


def default_length(wanted: int, longest: int) -> int:
    """The tokens per copy the picker opens on: ``wanted``, or the most the model's context holds."""
    return min(wanted, longest)


@dataclass(frozen=True)
class InductionPlan:
    caption: str  # the sequence in words
    top: tuple[tuple[int, int, float], ...]  # (layer, head, score), highest first; ties: the lower layer and head
    losses: tuple[str, str, str]  # the first copy's and the second's mean loss, and the change (all as shown)
    rows: list[list]  # the download's: layer, head, score


def induction_plan(
    scores: np.ndarray, n_tokens: int, bos: str | None, length: int, seed: int, first: float, second: float
) -> InductionPlan:
    """The plan of one run: ``n_tokens`` tokens (``bos``: the model's BOS token first, else None) of ``length``
    random tokens twice; mean losses ``first`` and ``second`` (nats). Shapes: scores [L, H]."""
    start = f"{bos} (the model's BOS token), then " if bos is not None else ""
    caption = (f"{n_tokens} tokens: {start}{length} random ordinary tokens (seed {seed}), then the same {length} "
               f"again. Scores are over the {length - 1} second-copy tokens that have a token after their earlier "
               "copy.")  # fmt: skip
    L, H = scores.shape
    rows = [[la, he, f"{scores[la, he]:.6g}"] for la in range(L) for he in range(H)]
    losses = (f"{first:.2f} nats", f"{second:.2f} nats", f"{second - first:.2f}")
    order = np.argsort(-scores, axis=None, kind="stable")[:LISTED_HEADS]
    top = tuple((int(i // H), int(i % H), float(scores.flat[i])) for i in order)
    return InductionPlan(caption, top, losses, rows)

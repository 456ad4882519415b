"""Induction heads, live (Olsson et al. 2022): random tokens repeated twice, run through a decoder.

The sequence is N random token ids (drawn with ``torch.Generator().manual_seed(seed)`` from the
tokenizer's vocabulary, special and added tokens left out; without replacement when the vocabulary has at
least N such ids, so a token occurs once per copy) followed by the same N ids again. By default the
model's BOS token (``tokenizer.bos_token_id``, e.g. SmolLM2's ``<|im_start|>``) is put in front when it
has one, so position 0 is the usual first token (the attention sink) and not a random one; then
``offset`` is 1 and every position below moves by one.

    first copy:  positions offset + j        (j = 0 .. N-1)
    second copy: positions offset + N + j

Induction score of a head: the mean attention from each second-copy token (offset + N + j) to the token
right after its earlier copy (offset + j + 1), over j = 0 .. N-2 (the last token of the second copy has
no "after" in the first copy inside the copy). A perfect induction head scores 1.

Loss: the model's cross-entropy of each token given the tokens before it (the logits at position t
predict token t + 1), stored at the predicted token's position (NaN where nothing predicts it: position 0).
A model that learns in context predicts the second copy far better than the first.

Shapes: scores [n_layers, n_heads]; losses [n_tokens] with n_tokens = offset + 2N.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.config import MAX_INDUCTION_LENGTH, MAX_SEED, MIN_INDUCTION_LENGTH, Config
from mha_viz.models.load import LoadedModel
from mha_viz.models.tokens import Tokens, make_tokens
from mha_viz.pipeline import budget, estimates
from mha_viz.pipeline.road import Recording, layer_trace
from mha_viz.trace import MhaVizError


@dataclass(frozen=True, eq=False)
class InductionRun:
    """One repeated-random-tokens experiment on one model."""

    tokens: Tokens  # [offset + 2N]
    length: int  # N: tokens per copy
    seed: int
    offset: int  # 1 when the model's BOS token is in front, else 0
    scores: np.ndarray  # [n_layers, n_heads] float64
    losses: np.ndarray  # [offset + 2N] float64, NaN at position 0

    def copy(self, which: int) -> slice:
        """Positions of the first (0) or second (1) copy."""
        start = self.offset + which * self.length
        return slice(start, start + self.length)

    def copy_losses(self, which: int) -> np.ndarray:
        """Per-token loss over one copy. Shapes: [N] (NaN where nothing predicts the token)."""
        return self.losses[self.copy(which)]

    def mean_loss(self, which: int) -> float:
        """Mean loss over the tokens of one copy that are predicted from something."""
        return float(np.nanmean(self.copy_losses(which)))

    def top_heads(self, k: int = 5) -> list[tuple[int, int, float]]:
        """(layer, head, score) of the k highest-scoring heads, best first."""
        n_heads = self.scores.shape[1]
        order = np.argsort(-self.scores, axis=None, kind="stable")[:k]
        return [(int(i // n_heads), int(i % n_heads), float(self.scores.flat[i])) for i in order]


def is_decoder(lm: LoadedModel) -> bool:
    """Whether the experiment runs on this model: a decoder-only causal language model."""
    return not lm.encoder_decoder and lm.causal and lm.causal_lm


def max_length(lm: LoadedModel, bos: bool = True) -> int:
    """The longest N the model takes (at most MAX_INDUCTION_LENGTH)."""
    return min(MAX_INDUCTION_LENGTH, (lm.max_tokens - int(bos and bos_id(lm) is not None)) // 2)


def needs_decoder(lm: LoadedModel) -> None:
    """Refuse models that are not decoder-only causal language models (one-line message)."""
    if lm.encoder_decoder:
        raise MhaVizError(
            f"induction needs a decoder-only model (a causal language model); {lm.name} is an encoder-decoder model"
        )
    if not (lm.causal and lm.causal_lm):
        raise MhaVizError(
            f"induction needs a decoder (a causal language model such as smollm2); {lm.name} is an encoder"
        )


def check_length(lm: LoadedModel, length: int, bos: bool = True) -> None:
    """Refuse N outside MIN_INDUCTION_LENGTH..MAX_INDUCTION_LENGTH or a sequence longer than the model takes."""
    if (
        isinstance(length, bool)
        or not isinstance(length, int)
        or not MIN_INDUCTION_LENGTH <= length <= MAX_INDUCTION_LENGTH
    ):
        raise MhaVizError(
            f"the length must be a whole number from {MIN_INDUCTION_LENGTH} to {MAX_INDUCTION_LENGTH}, got {length!r}"
        )
    n = 2 * length + int(bos and bos_id(lm) is not None)
    if n > lm.max_tokens:
        most = (lm.max_tokens - (n - 2 * length)) // 2
        raise MhaVizError(f"{n} tokens are more than {lm.name} takes ({lm.max_tokens}); use a length of at most {most}")


def bos_id(lm: LoadedModel) -> int | None:
    bos = getattr(lm.tokenizer, "bos_token_id", None)
    return None if bos is None else int(bos)


def candidate_ids(lm: LoadedModel) -> torch.Tensor:
    """Token ids to draw from: the vocabulary (as far as both the tokenizer and the embedding go) without
    special or added tokens. Shapes: [n_candidates] long."""
    tok = lm.tokenizer
    size = len(tok)
    emb = lm.model.get_input_embeddings()
    if emb is not None:
        size = min(size, int(emb.weight.shape[0]))
    avoid = set(getattr(tok, "all_special_ids", []) or []) | set(getattr(tok, "added_tokens_decoder", {}) or {})
    keep = torch.ones(size, dtype=torch.bool)
    keep[[i for i in avoid if 0 <= i < size]] = False
    ids = torch.nonzero(keep).flatten()
    if ids.numel() == 0:
        raise MhaVizError(f"{lm.name}'s tokenizer has no ordinary tokens to draw from")
    return ids


def random_ids(lm: LoadedModel, length: int, seed: int) -> list[int]:
    """N random ordinary token ids, reproducible from the seed (distinct when the vocabulary allows)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise MhaVizError(f"the seed must be a whole number from 0 to {MAX_SEED}, got {seed!r}")
    pool = candidate_ids(lm)
    g = torch.Generator().manual_seed(seed)
    if pool.numel() >= length:
        pick = torch.randperm(pool.numel(), generator=g)[:length]
    else:
        pick = torch.randint(pool.numel(), (length,), generator=g)
    return [int(i) for i in pool[pick]]


def repeated_ids(lm: LoadedModel, length: int, seed: int, bos: bool = True) -> tuple[list[int], int]:
    """(ids: [BOS] + r + r, offset) with r = random_ids(length, seed)."""
    body = random_ids(lm, length, seed)
    start = bos_id(lm) if bos else None
    head = [] if start is None else [start]
    return head + body + body, len(head)


def induction_scores(patterns: np.ndarray, length: int, offset: int = 0) -> np.ndarray:
    """Mean weight from second-copy query offset+N+j to key offset+j+1, over j = 0..N-2.

    Shapes: patterns [..., n, n] with n >= offset + 2N -> [...].
    """
    p = np.asarray(patterns, dtype=np.float64)
    if length < 2 or p.shape[-1] < offset + 2 * length or p.shape[-2] < offset + 2 * length:
        raise MhaVizError(f"a pattern of {p.shape[-2]} tokens has no two copies of {length} tokens")
    j = np.arange(length - 1)
    return p[..., offset + length + j, offset + j + 1].mean(-1)


def token_losses(logits: torch.Tensor, ids: list[int] | tuple[int, ...]) -> np.ndarray:
    """Cross-entropy of each token given those before it, at the token's position (NaN at 0).

    Shapes: logits [n, vocab]; ids [n] -> [n] float64.
    """
    target = torch.tensor(ids[1:], dtype=torch.long)
    ce = torch.nn.functional.cross_entropy(logits[:-1].float(), target, reduction="none")  # no float64 copy
    return np.concatenate([[np.nan], ce.double().numpy()])


def run_induction(lm: LoadedModel, length: int = 50, seed: int = 0, bos: bool = True) -> InductionRun:
    """The experiment on a loaded decoder: one recorded model pass, every layer's pattern scored in turn
    (our recomputation, checked against the model's own, as everywhere), and the per-token loss."""
    needs_decoder(lm)
    check_length(lm, length, bos)
    ids, offset = repeated_ids(lm, length, seed, bos)
    tokens = make_tokens(lm.tokenizer, ids)
    n = len(ids)
    d_head = max(1, lm.d_model // max(1, lm.n_heads))
    part = lm.part(None)
    shape = budget.Sizes(n, n, lm.n_heads, lm.n_kv_heads, d_head, lm.d_model, lm.n_layers(part))
    vocab = int(getattr(lm.model.config, "vocab_size", 0) or len(lm.tokenizer))
    need = budget.estimate("Heads", shape) + shape.recording_bytes() + 2 * estimates.F32 * n * vocab  # + the logits
    limit = budget.max_request_mb() * 2**20
    if need > limit:
        raise MhaVizError(
            f"the induction experiment with {length} tokens per copy would need about {need / 2**20:,.0f} MB; the "
            f"limit per request is {limit / 2**20:,.0f} MB (MHA_VIZ_MAX_REQUEST_MB). Use fewer tokens per copy"
        )
    run = pipeline.run(lm, torch.tensor([ids]))
    if run.logits is None:
        raise MhaVizError(f"{lm.name} has no language-model head; induction needs next-token predictions")
    losses = token_losses(run.logits[0], ids)
    rec = Recording(tokens, None, run)
    config = Config(device="cpu")
    scores = np.stack(
        [
            induction_scores(layer_trace(lm, rec, part, layer, config).pattern.numpy(), length, offset)
            for layer in range(lm.n_layers(part))
        ]
    )
    return InductionRun(tokens, length, seed, offset, scores, losses)

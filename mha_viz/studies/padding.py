"""The padding mask, shown on a real batch: two sentences of different lengths through the model at once.

The shorter sentence is padded on the right to the longer one's length and the model gets an attention mask
(1 = token, 0 = padding). Padded KEYS then get exactly zero weight in every row; padded QUERY rows are
computed too (over the real keys) but nothing downstream uses them. The real tokens' block of the padded
batch equals the sentence run alone (up to float rounding): that is what the mask is for.

Own weights: the same with our engine (X padded with zero rows, the key mask passed to compute_trace).
No streamlit here; the model is run through pipeline (models/ stays the only package importing transformers).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mha_viz import pipeline
from mha_viz.attention import attention_pattern, compute_trace
from mha_viz.config import Config
from mha_viz.models.load import LoadedModel
from mha_viz.models.tokens import Tokens
from mha_viz.pipeline import budget
from mha_viz.pipeline.own_road import own_input, own_weights
from mha_viz.pipeline.road import MATCH_TOL, Recording, layer_at, layer_trace, record
from mha_viz.trace import MhaVizError

PAD_LABEL = "[PAD]"


@dataclass(frozen=True, eq=False)
class PaddedBatch:
    """Two sentences as one padded batch, one layer's patterns, and the check against single runs.

    Shapes: ids [2, n] long (n = the longer length); mask [2, n] bool (True = a real token); pattern
    [2, n_heads, n, n] float32 (the padded batch's weights, padded query rows included); single[b]
    [n_heads, len_b, len_b] (sentence b run alone); labels[b] has n entries ("[PAD] (i)" for padding).
    """

    tokens: tuple[Tokens, Tokens]
    ids: torch.Tensor
    mask: torch.Tensor
    pattern: torch.Tensor
    single: tuple[torch.Tensor, torch.Tensor]
    labels: tuple[tuple[str, ...], tuple[str, ...]]
    causal: bool

    @property
    def lengths(self) -> tuple[int, int]:
        return len(self.tokens[0].ids), len(self.tokens[1].ids)

    @property
    def shorter(self) -> int:
        """The batch row that is padded (the second sentence when both have the same length)."""
        return 0 if self.lengths[0] < self.lengths[1] else 1

    def max_diff(self, row: int | None = None) -> float:
        """max |padded batch's real block - the sentence run alone| over every head (one row, or both)."""
        rows = (0, 1) if row is None else (row,)
        return max(
            float((self.pattern[b, :, : self.lengths[b], : self.lengths[b]] - self.single[b]).abs().max()) for b in rows
        )

    def pad_key_weight(self) -> float:
        """The largest weight any query (padded or not) gives a padded key: 0.0 exactly when masked."""
        pad_keys = ~self.mask[:, None, None, :]  # [2, 1, 1, n]
        return float(self.pattern.masked_fill(~pad_keys, 0.0).abs().max())


def pad_ids(first: Tokens, second: Tokens, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and the attention mask. Shapes: returns ids [2, n] long, mask [2, n] bool."""
    n = max(len(first.ids), len(second.ids))
    ids = torch.full((2, n), int(pad_id), dtype=torch.long)  # [2, n]
    mask = torch.zeros(2, n, dtype=torch.bool)  # [2, n]
    for b, t in enumerate((first, second)):
        ids[b, : len(t.ids)] = torch.tensor(t.ids, dtype=torch.long)
        mask[b, : len(t.ids)] = True
    return ids, mask


def _labels(tokens: Tokens, n: int) -> tuple[str, ...]:
    return (*tokens.labels, *(f"{PAD_LABEL} ({i})" for i in range(len(tokens.ids), n)))


def padded_batch(
    lm: LoadedModel, first: str, second: str, layer: int, first_alone: Recording | None = None
) -> PaddedBatch:
    """Run ``first`` and ``second`` through the real model as one right-padded batch and alone; one layer's
    patterns of both (encoders and decoder-only models; self-attention). ``first_alone``: ``first``'s recording,
    if there is one already (the dashboard's cached one)."""
    if lm.encoder_decoder:
        raise MhaVizError(f"{lm.name} is an encoder-decoder model; the padding demo runs encoders and decoders")
    at = layer_at(lm, None, None, layer)  # the model's first part, the layer resolved once (an unknown one refused)
    part, site = at.part, at.site
    alone = [first_alone or record(lm, first), record(lm, second)]  # tokenises, checks the budget, runs each alone
    tokens = (alone[0].tokens, alone[1].tokens)
    pad_id = getattr(lm.tokenizer, "pad_token_id", None)
    ids, mask = pad_ids(*tokens, 0 if pad_id is None else pad_id)
    n = ids.shape[1]
    d_head = max(1, lm.d_model // max(1, lm.n_heads))
    shape = budget.Sizes(n, n, lm.n_heads, lm.n_kv_heads, d_head, lm.d_model, 2 * len(lm.sites))
    budget.check("Masks", shape, recording=True, what="The padded batch")
    run = pipeline.run(lm, ids, attention_mask=mask.long(), only=(part, layer))  # this layer's call alone recorded
    call = run.calls[(part, layer)]
    if not call.delta <= MATCH_TOL:
        raise MhaVizError(f"mha-viz could not reproduce {lm.name}'s padded batch in layer {layer}; not shown")
    with torch.no_grad():
        _, pattern, _ = attention_pattern(
            call.q,
            call.k,
            scale=call.scaling,
            softcap=call.softcap,
            bias=call.bias,
            allowed=call.allowed,
            sink=call.sink,
        )  # [2, h, n, n]
    single = tuple(layer_trace(lm, rec, part, layer, Config(), x=False).pattern for rec in alone)  # [h, len_b, len_b]
    labels = (_labels(tokens[0], n), _labels(tokens[1], n))
    return PaddedBatch(tokens, ids, mask, pattern.float(), single, labels, bool(site.causal))


def own_padded_batch(lm: LoadedModel, first: str, second: str, config: Config) -> PaddedBatch:
    """Own weights: both texts' X padded with zero rows to one length, run by our engine with the key mask
    (and the config's causal mask), and each run alone."""
    weights = own_weights(config)
    (ta, xa), (tb, xb) = (own_input(lm, text, config, weights.d_model) for text in (first, second))
    tokens = (ta, tb)
    ids, mask = pad_ids(ta, tb, 0)
    n = ids.shape[1]
    shape = budget.Sizes(n, n, weights.n_heads, weights.n_heads, weights.d_head, weights.d_model, 4)
    budget.check("Masks", shape, what="The padded batch")
    kw = {"causal": config.causal, "scaled": config.scaled, "device": config.device}
    patterns, single = [], []
    for b, x in enumerate((xa, xb)):
        padded = torch.zeros(n, weights.d_model, dtype=x.dtype)  # [n, d_model]: padding rows are zeros
        padded[: x.shape[0]] = x
        patterns.append(compute_trace(weights, padded, key_mask=mask[b], **kw).pattern)  # [h, n, n]
        single.append(compute_trace(weights, x, **kw).pattern)  # [h, len_b, len_b]
    labels = (_labels(ta, n), _labels(tb, n))
    return PaddedBatch(tokens, ids, mask, torch.stack(patterns).float(), tuple(single), labels, config.causal)

"""Greedy generation with a key/value cache, interventions on every step, and where each head looked.

The prompt (all but its last token) runs once without a record, in tiles when long (capture.Recorder.tile_block:
never a whole [h, n, n]); then each step feeds one token and records its one query row in every layer, so a
step's attention is [h, 1, n] per layer: each head's most-attended key is kept (the retrieval score's test).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mha_viz.attention import attention_pattern
from mha_viz.config import TILE_BLOCK_CELLS
from mha_viz.models.capture import Recorder, recording
from mha_viz.models.interventions import Intervention, plan_of
from mha_viz.models.load import LoadedModel
from mha_viz.trace import MhaVizError


@dataclass(frozen=True)
class Generated:
    """Greedy tokens and where each head looked when each was chosen. Shapes: ids [steps] long (the chosen tokens);
    top [steps, L, H] long: the key position each head attended most from the query that chose that token."""

    ids: torch.Tensor
    top: torch.Tensor


def greedy(
    lm: LoadedModel, input_ids: torch.Tensor, steps: int, interventions: Sequence[Intervention] = ()
) -> Generated:
    """``steps`` greedy tokens after ``input_ids`` with ``interventions`` applied in every pass (the prompt's and
    each step's). Decoder-only models. Shapes: input_ids [1, n] long, n >= 2."""
    if not lm.causal_lm or lm.encoder_decoder:
        raise MhaVizError(f"{lm.name} does not generate text (a decoder-only language model does)")
    if input_ids.shape[-1] < 2:
        raise MhaVizError("the prompt needs at least two tokens")
    for step in interventions:
        step.check(lm)
    parts = lm.call_parts()
    plan = plan_of(interventions)
    ids = input_ids.to(lm.device)
    with torch.no_grad(), recording(Recorder(parts=parts, plan=plan, keep=False, tile_block=TILE_BLOCK_CELLS)):
        past = lm.model(input_ids=ids[:, :-1], use_cache=True, logits_to_keep=1).past_key_values
    token, chosen, tops = ids[:, -1:], [], []
    for _ in range(steps):
        rec = Recorder(parts=parts, plan=plan, extras=False)
        with torch.no_grad(), recording(rec):
            out = lm.model(input_ids=token, past_key_values=past, use_cache=True)
        past = out.past_key_values
        tops.append(torch.stack([_top_key(c) for c in sorted(rec.calls, key=lambda c: c.layer)]))  # [L, H]
        token = out.logits[:, -1:].argmax(-1)  # [1, 1]
        chosen.append(int(token))
    return Generated(ids=torch.tensor(chosen, dtype=torch.long), top=torch.stack(tops))


def _top_key(call: object) -> torch.Tensor:
    """Each head's most-attended key of a one-row call. Shapes: returns [H] long."""
    allowed = None if call.allowed is None else call.allowed[..., -1:, :]
    bias = None if call.bias is None else call.bias[..., -1:, :]
    _, pattern, _ = attention_pattern(call.q[0, :, -1:], call.k[0], scale=call.scaling, softcap=call.softcap,
                                      bias=None if bias is None else bias[0], sink=call.sink,
                                      allowed=None if allowed is None else allowed[0])  # fmt: skip
    return pattern[:, 0].argmax(-1)

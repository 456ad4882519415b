"""Several texts through the model in one padded forward pass, each text's recording cut back to its own tokens.

The texts are padded to the longest one (on the tokenizer's side, or as asked) and run with an attention mask
(1 = token, 0 = padding). Every recorded call is then sliced to each text's real positions — its queries, its keys,
its values, its block of the mask and bias — so a text's recording holds no padded position at all: the pattern
computed from it is a softmax over the text's own keys only. Padded keys got exactly zero weight in the model's own
pass too (checked: each call's self-check compares our recomputation with the model's weights over the whole padded
batch). The real tokens compute what they compute alone, up to float32 rounding of batched matrix products.

Right padding keeps every real token at its own position. Left padding shifts them, so the positions are passed to
the model explicitly (position ids counted over real tokens); a model whose forward takes no position ids is
padded on the right instead.

Shapes: ids [b, n] long and mask [b, n] long, n the longest text's length; a sliced call's q [1, h, len, dh].
"""

from __future__ import annotations

import dataclasses

import torch

from mha_viz.config import MAX_BATCH_CELLS, MAX_PADDING
from mha_viz.models.call import Call
from mha_viz.models.load import LoadedModel
from mha_viz.models.run import ModelRun, run_model
from mha_viz.models.tokens import Tokens
from mha_viz.pipeline.road import Recording, share_masks
from mha_viz.trace import MhaVizError

SIDES = ("right", "left")


def padding_side(lm: LoadedModel, side: str | None = None) -> str:
    """``side`` checked, or the tokenizer's own (right when it has none); left only where the model takes position
    ids (else right: a shifted position would change what an absolute-position model computes)."""
    chosen = side or str(getattr(lm.tokenizer, "padding_side", "right") or "right")
    if chosen not in SIDES:
        raise MhaVizError(f"padding side must be right or left, got {chosen!r}")
    if chosen == "left" and not _takes_position_ids(lm):
        return "right"
    return chosen


def pad(tokens: list[Tokens], pad_id: int, side: str) -> tuple[torch.Tensor, torch.Tensor, list[slice]]:
    """The texts' ids padded to the longest, the attention mask, and each text's real positions.

    Shapes: returns ids [b, n] long, mask [b, n] long (1 = token, 0 = padding)."""
    n = max(len(t.ids) for t in tokens)
    ids = torch.full((len(tokens), n), int(pad_id), dtype=torch.long)  # [b, n]
    mask = torch.zeros(len(tokens), n, dtype=torch.long)  # [b, n]
    spans = []
    for b, t in enumerate(tokens):
        span = slice(0, len(t.ids)) if side == "right" else slice(n - len(t.ids), n)
        ids[b, span] = torch.tensor(t.ids, dtype=torch.long)
        mask[b, span] = 1
        spans.append(span)
    return ids, mask, spans


def record_batch(lm: LoadedModel, tokens: list[Tokens], side: str | None = None) -> list[Recording]:
    """One padded forward pass over ``tokens`` (self-attention models, texts within the model's limit); each
    text's recording holds only its own positions (q, k, v, mask, bias and what W^O read, per call). A single
    pass of one text is a batch of one (no padding)."""
    if lm.encoder_decoder:
        raise MhaVizError(f"{lm.name} is an encoder-decoder model; padded batches run encoders and decoders")
    if any(t.cut is not None for t in tokens):
        raise MhaVizError("a text over the model's limit cannot join a padded batch")
    side = padding_side(lm, side)
    pad_id = getattr(lm.tokenizer, "pad_token_id", None)
    ids, mask, spans = pad(tokens, 0 if pad_id is None else int(pad_id), side)
    positions = None
    if side == "left":
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [b, n]: each real token at its own position
    run = run_model(lm, ids, attention_mask=mask, extras=False, position_ids=positions)
    out = []
    for b, (t, span) in enumerate(zip(tokens, spans, strict=True)):
        calls = {key: _item(call, b, span) for key, call in run.calls.items()}
        hidden = run.hidden[b : b + 1, span]  # [1, len, d_model]
        out.append(Recording(t, None, share_masks(ModelRun(calls, hidden, None))))
    return out


def groups(
    lengths: list[int], size: int, n_heads: int, max_cells: int = MAX_BATCH_CELLS, max_padding: float = MAX_PADDING
) -> list[list[int]]:
    """Indices of the texts in forward passes, shortest texts together: at most ``size`` texts, ``max_cells``
    attention weights (texts × heads × n², n the pass's longest text) and ``max_padding`` padded positions per real
    one (a pass computes every padded position as if it were a token: on a CPU, where the model's matrix products
    are compute-bound, padding costs what it pads); a text too long to share a pass goes alone."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out: list[list[int]] = []
    real = 0  # the current pass's real positions
    for i in order:
        last = out[-1] if out else None
        n = lengths[i]  # sorted: text i is the pass's longest if it joins
        if (
            last is not None and len(last) < size and (len(last) + 1) * n_heads * n**2 <= max_cells
            and (len(last) + 1) * n <= (1 + max_padding) * (real + n)
        ):  # fmt: skip
            last.append(i)
            real += n
        else:
            out.append([i])
            real = n
    return out


def _item(call: Call, b: int, span: slice) -> Call:
    """Batch item ``b`` of a recorded call, cut to its real positions (self-attention: the same span for queries
    and keys). Shapes: q [1, h, len, dh]; k, v [1, kv, len, dh]; bias, allowed [1, h|1, len, len]; wo_read
    [1, len, h*dv]."""
    return dataclasses.replace(
        call, q=_cut(call.q, b, span, 2), k=_cut(call.k, b, span, 2), v=_cut(call.v, b, span, 2),
        bias=_cut(call.bias, b, span, 2, 3), allowed=_cut(call.allowed, b, span, 2, 3),
        wo_in=_cut(call.wo_in, b, span, 1), wo_read=_cut(call.wo_read, b, span, 1),
        x=None, x_kv=None, wo_out=None, q_pre=None, k_pre=None, tiles=None, tile_f=0, c_kv=None, k_rope_pre=None,
        v2=None,
    )  # fmt: skip


def _cut(t: torch.Tensor | None, b: int, span: slice, *axes: int) -> torch.Tensor | None:
    """Item ``b`` of ``t`` [b|1, ...] (an item axis of 1 is broadcast to every item: kept) with its position
    ``axes`` cut to ``span`` (an axis of 1 is broadcast too), as a tensor of its own."""
    if t is None:
        return None
    item = t[b : b + 1] if t.shape[0] > 1 else t
    for d in axes:
        if item.shape[d] > 1:
            item = item.narrow(d, span.start, span.stop - span.start)
    return item.contiguous()


def _takes_position_ids(lm: LoadedModel) -> bool:
    import inspect

    return "position_ids" in inspect.signature(lm.model.forward).parameters

"""One forward pass of a loaded model, recorded per request (no lock: see capture.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mha_viz.config import TILE_BLOCK_CELLS, TILE_CHECK_ROWS
from mha_viz.models.call import Call
from mha_viz.models.capture import Recorder, StopForward, recording
from mha_viz.models.interventions import Intervention, Record, plan_of
from mha_viz.models.load import LoadedModel
from mha_viz.models.offload import linear_in_out
from mha_viz.models.watch import watching
from mha_viz.trace import MhaVizError


@dataclass(frozen=True, eq=False)
class ModelRun:
    """What one forward pass recorded: every attention call by (part, layer), and the model's outputs; ``records``:
    what each Record intervention of the pass recorded (its store, e.g. score_record.SourceRecord), by the Record.

    Shapes: hidden [b, pos, d_model] (the last hidden state; the decoder's for encoder-decoders);
    logits [b, pos, vocab] for models with an LM head, else None.
    """

    calls: dict[tuple[str, int], Call]
    hidden: torch.Tensor
    logits: torch.Tensor | None
    records: dict[Record, Any] = field(default_factory=dict)


def run_model(
    lm: LoadedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    decoder_ids: torch.Tensor | None = None,
    record: bool = True,
    extras: bool = True,
    tile_cells: int = 0,
    tile_block: int = 0,
    hidden_states: bool = True,
    only: tuple[str, int] | None = None,
    position_ids: torch.Tensor | None = None,
    progress: Callable[[int], None] | None = None,
    interventions: Sequence[Intervention] = (),
) -> ModelRun:
    """Run the whole model once, recording every attention call (``record``), with ``interventions``
    (interventions.py: Ablate, Replace, ShareKV, Rotate, HeadMask, Route, KeyMask, ... — what is done to a call
    for this pass only, applied in their stage order; a Record's module hooks for this pass only, what it recorded
    in ModelRun.records). Studies come in through pipeline.run (pipeline/door.py).

    ``extras`` False (long texts): record only what the attention pattern needs (q, k, v, bias, mask: no X,
    no W^O input and output, no pre-rotary q and k) and compute the LM head's logits for the last position
    only (a decoder's logits at 2048 tokens are 2048 × 49152 floats; none are kept: logits None).
    ``tile_cells`` > 0: each call keeps its checked pattern's block means too (Call.tiles: the Overview's tiles).
    ``tile_block`` > 0: a call with more scores than this is computed a block of query rows at a time (models/tiled.py,
    never a whole [h, n, n]), its rows' softmax statistics kept (Call.row_lse).
    ``hidden_states`` False: no layer's hidden state is held (hidden: the last one if the model gives it, else
    [b, 0, d_model]).
    ``only`` (part, layer): record that call alone (the whole pass still runs).
    ``progress(k)`` is called after each attention call with the number made so far (a long text's progress bar).

    Shapes: input_ids [b, pos] long; attention_mask [b, pos] (1 = token, 0 = padding); decoder_ids
    [b, target_pos] (required for encoder-decoder models); position_ids [b, pos] long (left-padded batches: each
    real token at its own position; None: 0, 1, 2, ...).
    """
    if lm.encoder_decoder and decoder_ids is None:
        raise MhaVizError(f"{lm.name} is an encoder-decoder model: give the decoder's text too (target)")
    if not lm.encoder_decoder and decoder_ids is not None:
        raise MhaVizError(f"{lm.name} has no decoder input; a target text is only for encoder-decoder models")
    steps = list(interventions)
    for step in steps:
        step.check(lm)
    parts = lm.call_parts()
    rec = Recorder(parts=parts, plan=plan_of(steps), keep=record, extras=extras, tile_cells=tile_cells, only=only,
                   progress=progress, tile_block=tile_block, check_rows=TILE_CHECK_ROWS)  # fmt: skip
    dev = lm.device
    kwargs: dict = {"input_ids": input_ids.to(dev), "output_hidden_states": hidden_states}
    kwargs.update(_no_cache(lm))  # no key/value cache: nothing is generated after this pass
    if not extras and "logits_to_keep" in _forward_parameters(lm):
        kwargs["logits_to_keep"] = 1
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask.to(dev)
    if position_ids is not None:
        kwargs["position_ids"] = position_ids.to(dev)
    if decoder_ids is not None:
        kwargs["decoder_input_ids"] = decoder_ids.to(dev)
    with torch.no_grad(), recording(rec), watching(lm.model, lm, [s for s in steps if isinstance(s, Record)]) as kept:
        out = lm.model(**kwargs)
    calls = {(c.part, c.layer): c for c in rec.calls}
    if record and len(calls) != (1 if only else len(lm.sites)):
        raise MhaVizError(f"{lm.name} made {len(calls)} attention calls where {len(lm.sites)} were expected")
    hidden = getattr(out, "decoder_hidden_states", None) or out.hidden_states
    if not hidden_states:  # a long text: every layer's hidden state is not held (at 8,192 tokens of SmolLM2: 585 MB)
        last = getattr(out, "last_hidden_state", None)
        hidden = [torch.empty(input_ids.shape[0], 0, lm.d_model) if last is None else last]
    logits = getattr(out, "logits", None)
    return ModelRun(
        calls=calls,
        hidden=hidden[-1].detach().float().cpu(),
        logits=None if logits is None or not extras else logits.detach().float().cpu(),
        records=kept,
    )


def output_projection(lm: LoadedModel, part: str, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The layer's W^O as [n_heads * d_head, d_model] (in -> out) and its bias [d_model], copied."""
    site = lm.site(part, layer)
    if site.moa:
        raise MhaVizError(f"{lm.name}'s W^O is chosen per token (a mixture of attention heads): it has no one W^O")
    return linear_in_out(lm.model.get_submodule(site.wo))


def token_embeddings(lm: LoadedModel, ids: tuple[int, ...], positions: bool = False) -> torch.Tensor:
    """The model's input embeddings of ``ids`` (plus learned absolute position embeddings if asked and
    the model has them), copied. Shapes: returns [len(ids), d_model] float32 on the CPU."""
    words = lm.model.get_input_embeddings()
    index = torch.tensor(ids, dtype=torch.long, device=lm.device)  # [n] (an offloaded table's hook moves it on)
    with torch.no_grad():
        x = words(index)  # [n, d_model]
        pos = _position_embeddings(lm.model) if positions else None
        if pos is not None:
            x = x + pos(torch.arange(len(ids), device=index.device))
    return x.detach().float().cpu().clone()


def word_embeddings(lm: LoadedModel, words: Sequence[str], positions: bool = False) -> torch.Tensor:
    """Each word's embedding as the mean of its word pieces' input embeddings (no special tokens), plus the
    model's learned position embedding at the word's position if asked. Shapes: returns [len(words), d_model].
    """
    pieces = lm.tokenizer(list(words), add_special_tokens=False)["input_ids"]
    rows = []
    for word, ids in zip(words, pieces, strict=True):
        if not ids:
            raise MhaVizError(f"{lm.name}'s tokenizer reads nothing in the word {word[:40]!r}; remove it")
        rows.append(token_embeddings(lm, tuple(ids)).mean(0))  # [d_model]
    x = torch.stack(rows)  # [n_words, d_model]
    pos = _position_embeddings(lm.model) if positions else None
    if pos is not None:
        with torch.no_grad():
            x = x + pos(torch.arange(len(words), device=lm.device)).detach().float().cpu()
    return x


def _position_embeddings(model: torch.nn.Module) -> torch.nn.Embedding | None:
    for name, mod in model.named_modules():
        if name.endswith(("position_embeddings", "wpe")) and isinstance(mod, torch.nn.Embedding):
            return mod
    return None


def run_layer(
    lm: LoadedModel, input_ids: torch.Tensor, part: str, layer: int, progress: Callable[[int], None] | None = None
) -> ModelRun:
    """Run the model only as far as one attention layer, recording that layer alone: the same values as
    run_model's record of it (the layers before compute exactly what they compute in a whole pass), at
    the memory of one layer, and without the layers after it. For decoder-only and encoder-only models.

    ``progress(k)`` is called after each attention call with the number made so far.
    Shapes: input_ids [b, pos] long; returns calls {(part, layer): Call}, hidden [b, 0, d_model] (the pass
    stopped early: no last hidden state), logits None.
    """
    if lm.encoder_decoder:
        raise MhaVizError(f"{lm.name} is an encoder-decoder model: record it whole (run_model)")
    lm.site(part, layer)
    parts = lm.call_parts()
    rec = Recorder(parts=parts, only=(part, layer), stop=True, progress=progress, tile_block=TILE_BLOCK_CELLS,
                   check_rows=TILE_CHECK_ROWS)  # fmt: skip
    with torch.no_grad(), recording(rec), contextlib.suppress(StopForward):
        lm.model(input_ids=input_ids.to(lm.device), **_no_cache(lm))
    if len(rec.calls) != 1 or rec.calls[0].wo_out is None:
        raise MhaVizError(f"{lm.name} made no complete attention call at {part} layer {layer}")
    call = rec.calls[0]
    return ModelRun(calls={(part, layer): call}, hidden=torch.empty(call.x.shape[0], 0, lm.d_model), logits=None)


def _forward_parameters(lm: LoadedModel) -> Mapping:
    import inspect

    return inspect.signature(lm.model.forward).parameters


def _no_cache(lm: LoadedModel) -> dict:
    return {"use_cache": False} if "use_cache" in _forward_parameters(lm) else {}

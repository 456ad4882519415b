"""THE road from (config, text) to traces, shared by the CLI, the dashboard and tests.

    load(config) -> LoadedModel
    record(lm, text, target) -> Recording        one model pass, every attention call recorded
    layer_of(lm, rec, sel) -> Layer              a selection's layer resolved once (its site, its call)
    trace_at(layer, config)                      the trace of one layer, after the what-if edits
    layer_trace(lm, rec, part, layer, config)    ... the same from a part and a layer
    traces(config, text, ...)                    all of it in one call (the CLI)

Recording, the Layer handle and a layer's trace are in layer.py (re-exported here); the what-if edits of a layer's
weights and W^O in what_ifs.py; own weights' one layer in own_road.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from mha_viz.config import MATCH_TOL, MAX_LONG_TEXT_CHARS, MAX_TEXT_CHARS, TILE_BLOCK_CELLS, Config, hosted  # noqa: F401
from mha_viz.models.call import Call  # noqa: F401 (re-exported: the dashboard's caches)
from mha_viz.models.load import LoadedModel, load_model
from mha_viz.models.run import ModelRun, run_layer, run_model
from mha_viz.models.sources import smollm2_dir, smollm2_ready  # noqa: F401 (the dashboard's way in)
from mha_viz.models.tokens import Tokens, clean_text, cut_notice, decoder_tokens, tokenize, word_tokens  # noqa: F401
from mha_viz.pipeline import budget
from mha_viz.pipeline.layer import (  # noqa: F401 (the road's recording, layer handle and layer trace)
    Layer,
    Recording,
    allowed_keys,
    call_input,
    check_match,
    d_model,
    layer_at,
    layer_call,
    layer_input,
    layer_of,
    layer_trace,
    layer_weights,
    sizes,
    trace_at,
    with_call,
)
from mha_viz.selection import Selection
from mha_viz.trace import AttentionTrace, MhaVizError

SLIM_BYTES = 128 * 2**20  # a recording larger than this keeps only what the patterns need (Recording.slim)


def load(config: Config) -> LoadedModel:
    """The pretrained model the config names (the bundled MiniLM for own weights: its tokenizer)."""
    return load_model(config.model_name or None, config.model_device)


def encode(lm: LoadedModel, text: str, target: str | None = None) -> tuple[Tokens, Tokens | None]:
    """Tokens of the text, and of the decoder's text for encoder-decoder models (refused for others).

    A text (or decoder text) longer than the model takes is cut to its limit: ``Tokens.cut`` says what
    was dropped and cut_notice(tokens.cut, lm.name, text) words it; every view then works on the cut text."""
    # a long text is recorded in tiles (models/tiled.py): SmolLM2's 8,192 tokens; hosted mode keeps MAX_TEXT_CHARS
    tokens = tokenize(lm.tokenizer, text, lm.max_tokens, lm.name, max_chars=MAX_TEXT_CHARS if hosted() else
                      MAX_LONG_TEXT_CHARS)  # fmt: skip
    if not lm.encoder_decoder:
        if target:
            raise MhaVizError(f"{lm.name} is not an encoder-decoder model; a target text is not used with it")
        return tokens, None
    if not target:
        raise MhaVizError(f"{lm.name} is an encoder-decoder model: give the decoder's text too (target)")
    return tokens, decoder_tokens(lm.tokenizer, target, lm.decoder_start_id or 0, lm.max_tokens, lm.name)


def _shape(lm: LoadedModel, tokens: Tokens, target_tokens: Tokens | None) -> budget.Sizes:
    n = max(len(tokens.ids), len(target_tokens.ids) if target_tokens else 0)
    d_head = max(1, lm.d_model // max(1, lm.n_heads))
    return budget.Sizes(n, n, lm.n_heads, lm.n_kv_heads, d_head, lm.d_model, len(lm.sites))


def _slim(lm: LoadedModel, shape: budget.Sizes) -> bool:
    """A recording this large keeps only what the patterns need (run_layer takes no decoder input)."""
    return shape.recording_bytes() > SLIM_BYTES and not lm.encoder_decoder


def is_slim(lm: LoadedModel, text: str, target: str | None = None) -> bool:
    """Whether record() keeps only what the patterns need for this text (a long text; tokenising only)."""
    return _slim(lm, _shape(lm, *encode(lm, text, target)))


def tiled_bytes(s: budget.Sizes) -> int:
    """A long text's tiled recording (models/tiled.py): every layer's q, k, v and row statistics, the mask once
    (additive and bool), one block of scores (three copies: scores, the mask added, the softmax) and the pass's own
    activations (a few [n, d_model] and the MLP's [n, ~4 d_model])."""
    per_layer = 4 * (s.n_heads * s.n_q * s.d_head + 2 * s.n_kv_heads * s.n_k * s.d_head) + 16 * s.n_heads * s.n_q
    return s.n_layers * per_layer + 5 * s.n_q * s.n_k + 3 * 4 * TILE_BLOCK_CELLS + 4 * 8 * s.n_q * s.d_model


def recording_bytes(s: budget.Sizes, slim: bool) -> int:
    """The memory one recorded pass is admitted by, the one rule the road's check (record, record_layer) and the
    page's admission (ui/pass_budget.py) share: a slim (long) text is recorded in tiles, so its tiled recording
    (tiled_bytes) and SLACK; else the untiled estimate with one layer's trace (budget.recording_estimate)."""
    return tiled_bytes(s) + budget.SLACK if slim else budget.recording_estimate(s)


def _check_recording(s: budget.Sizes, slim: bool) -> None:
    """Refuse a recording over the request budget (hosted mode's is tighter), by recording_bytes."""
    budget.check_bytes(recording_bytes(s, slim), "Recording the model", s)


def record(
    lm: LoadedModel,
    text: str,
    target: str | None = None,
    tile_cells: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> Recording:
    """Tokenise and run the model once, recording every attention call. A slim recording (a long text) also keeps
    each layer's pattern as block means at most ``tile_cells`` per side, if asked (rows.pooled_patterns uses them).
    ``progress(done, total)`` is called after each recorded call (total: the model's attention calls)."""
    tokens, target_tokens = encode(lm, text, target)
    shape = _shape(lm, tokens, target_tokens)
    slim = _slim(lm, shape)
    _check_recording(shape, slim)
    dec = None if target_tokens is None else torch.tensor([target_tokens.ids])
    told = None if progress is None else (lambda k: progress(k, len(lm.sites)))
    run = run_model(
        lm,
        torch.tensor([tokens.ids]),
        decoder_ids=dec,
        extras=not slim,
        tile_cells=tile_cells * slim,
        progress=told,
        tile_block=TILE_BLOCK_CELLS,
        hidden_states=not slim,
    )
    return Recording(tokens, target_tokens, share_masks(run), slim)


def record_layer(lm: LoadedModel, sel: Selection, progress: Callable[[int, int], None] | None = None) -> Recording:
    """A long text's shown layer first (sel.text, sel.part, sel.layer): the model run only as far as that layer and
    its call recorded whole (run_layer: the values the whole recording gives that layer), a partial recording of that
    call alone. The dashboard draws it while record() runs the rest (at 2048 tokens of SmolLM2, layer 9: ~5 s
    instead of ~25 s). ``progress(done, total)`` is called after each layer on the way (total: layer + 1)."""
    tokens, _ = encode(lm, sel.text, None)  # a long text: no decoder text (record() keeps encoder-decoders whole)
    _check_recording(_shape(lm, tokens, None), True)
    part, layer = lm.part(sel.part), int(sel.layer or 0)
    told = None if progress is None else (lambda k: progress(k, layer + 1))
    run = run_layer(lm, torch.tensor([tokens.ids]), part, layer, progress=told)
    return Recording(tokens, None, run, slim=True, partial=True)


def share_masks(run: ModelRun) -> ModelRun:
    """Calls whose masks are equal share one mask tensor (a decoder's causal mask is the same in every layer:
    [1, 1, n, n] bool each, 126 MB over SmolLM2's 30 layers at 2048 tokens, held once instead)."""
    seen: list[torch.Tensor] = []
    for call in run.calls.values():
        if call.allowed is None:
            continue
        same = next((m for m in seen if _same_view(m, call.allowed)), None)
        if same is None:
            same = next((m for m in seen if m.shape == call.allowed.shape and torch.equal(m, call.allowed)), None)
        if same is None:
            seen.append(call.allowed)
        else:
            call.allowed = same
    return run


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors view the same memory the same way (a long text's layers share one boolean mask)."""
    return a.data_ptr() == b.data_ptr() and a.stride() == b.stride() and a.dtype == b.dtype and a.shape == b.shape


def traces(
    config: Config,
    text: str,
    target: str | None = None,
    part: str | None = None,
    layers: Sequence[int] | None = None,
    lm: LoadedModel | None = None,
) -> tuple[Tokens, Tokens, list[AttentionTrace]]:
    """(query tokens, key tokens, traces of the chosen layers: all by default) for a pretrained model."""
    lm = lm or load(config)
    rec = record(lm, text, target)
    part = lm.part(part)
    chosen = range(lm.n_layers(part)) if layers is None else layers
    found = [layer_trace(lm, rec, part, int(i), config) for i in chosen]
    return rec.query_tokens(part), rec.key_tokens(part), found

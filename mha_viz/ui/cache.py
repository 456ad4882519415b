"""The dashboard's caches over the pipeline: plain values in, what the pipeline returns out; nothing drawn.

The model is shared read-only by every session (ui/model_store.py); everything else is in caches that
hold their caps in entries and bytes (ui/memo.py: a value larger than its cache is computed, shown and
dropped), so memory levels off however many texts people try and whatever they ask for. The model and its
recorded pass are in ui/cache_pass.py (re-exported here); here what is read from them: Base, traces, every layer's
patterns and own weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mha_viz.config import Config, OwnWeights, Source
from mha_viz.own import save_weights
from mha_viz.pipeline import own_road
from mha_viz.pipeline import road as pipeline
from mha_viz.pipeline.road import Call, Tokens
from mha_viz.selection import Selection
from mha_viz.studies import sweeps as studies
from mha_viz.trace import AttentionTrace, AttentionWeights
from mha_viz.ui.cache_pass import (  # noqa: F401 (the model and its recorded pass: importable from here as before)
    MODELS,
    first_layer,
    get_first_layer,
    get_model,
    get_recording,
    is_recorded,
    long_unrecorded,
    model_of,
    provisional,
    recording_of,
    recording_progress,
)
from mha_viz.ui.memo import sized_cache


@dataclass(frozen=True, kw_only=True)
class Base:
    """What every view needs to know about the chosen model, attention kind and text (built by keyword)."""

    tokens: Tokens  # query side
    key_tokens: Tokens  # key side (the source text for cross-attention)
    part: str
    parts: tuple[str, ...]
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    causal: bool  # the model's own mask is causal here
    plain: bool  # Q, K, V are plain linear maps of X: the what-ifs that rebuild the layer are offered
    model_name: str
    own: bool


def own_patterns(config: Config, text: str, measure: str = "weight") -> np.ndarray:
    """Own weights' one layer as "every layer": what get_all_patterns and the long-text readers return for a
    pretrained model. Shapes: [1, H, n, n] float32."""
    from mha_viz.analysis.norms import shown_pattern

    return shown_pattern(get_trace(Selection(config, text)), measure)[None]


@sized_cache(max_entries=8, max_mb=64)
def get_own(config: Config, text: str) -> tuple[Tokens, AttentionTrace]:
    tokens, _, trace = own_road.own_trace(model_of(config), text, config)
    return tokens, trace


def get_base(sel: Selection) -> Base:
    """What every view needs to know about the selected model, attention kind, layer and text."""
    config = sel.config
    if config.own:  # sizes only: the trace itself waits until the view's budget is checked
        tokens = own_road.own_tokens(model_of(config), sel.text, config)
        w = get_own_weights(config)
        return Base(
            tokens=tokens, key_tokens=tokens, part="encoder", parts=("encoder",), n_layers=1, n_heads=w.n_heads,
            n_kv_heads=w.n_kv_heads, d_head=w.d_head, d_model=w.d_model, causal=False, plain=True,
            model_name="own weights", own=True,
        )  # fmt: skip
    lm = model_of(config)
    at = pipeline.layer_of(lm, recording_of(sel, one_layer=True), sel)
    call = at.call
    return Base(
        tokens=at.rec.query_tokens(at.part), key_tokens=at.rec.key_tokens(at.part), part=at.part, parts=lm.parts,
        n_layers=lm.n_layers(at.part), n_heads=int(call.q.shape[1]), n_kv_heads=int(call.k.shape[1]),
        d_head=int(call.q.shape[-1]), d_model=pipeline.d_model(at.rec), causal=at.site.causal,
        plain=bool(at.site.qkv), model_name=lm.name, own=False,
    )  # fmt: skip


def get_trace(sel: Selection, x: bool = True) -> AttentionTrace:
    """The selected layer's trace after the what-if edits in sel.config. ``x`` False: a view that shows only weights
    does not need a long text's X (pipeline.trace_at); short texts always have it (one cache entry either way)."""
    whole = x or sel.config.own or not recording_of(sel, one_layer=True).slim
    return _get_trace(sel, whole)


@sized_cache(max_entries=64, max_mb=256)
def _get_trace(sel: Selection, x: bool) -> AttentionTrace:
    if sel.config.own:
        return get_own(sel.config, sel.text)[1]
    rec = whole_layer(sel) if x else recording_of(sel, one_layer=True)
    return pipeline.trace_at(pipeline.layer_of(model_of(sel.config), rec, sel), sel.config, x=x)


@sized_cache(max_entries=4, max_mb=128)
def _layer_call(source: Source, text: str, target: str | None, part: str, layer: int) -> Call:
    """One layer's whole call (X, W^O in and out, pre-rotary q and k) of a slim recording: the model run as far as
    this layer, once per layer (at 2048 tokens of SmolLM2, ~30 MB). Keyed by where the model comes from alone."""
    sel = Selection(Config.of(source=source), text, target, part, layer)
    return pipeline.layer_of(model_of(sel.config), recording_of(sel), sel).whole_call()


def whole_layer(sel: Selection) -> pipeline.Recording:
    """The recording with the selected layer whole (a short text's recording is whole already)."""
    part = model_of(sel.config).part(sel.part)
    rec = recording_of(sel, one_layer=True)
    if not rec.slim or rec.partial:  # a partial recording's one call is whole already
        return rec
    call = _layer_call(sel.config.source, sel.text, sel.target, part, sel.layer)
    return pipeline.with_call(rec, part, sel.layer, call)


def get_all_patterns(sel: Selection, measure: str = "weight") -> np.ndarray:
    """Every layer's pattern of the selected part (weights, or contribution shares), whatever the selected layer.
    Shapes: [L, H, q_pos, k_pos] float32."""
    return _all_patterns(sel.at_every_layer(), measure)


@sized_cache(max_entries=16, max_mb=192)
def _all_patterns(sel: Selection, measure: str) -> np.ndarray:
    if sel.config.own:
        return own_patterns(sel.config, sel.text, measure)
    return studies.all_patterns(model_of(sel.config), recording_of(sel), sel.part, sel.config, measure)


def get_own_weights(config: Config) -> AttentionWeights:
    """Own weights (made or loaded once per own-weights settings, whatever the what-ifs; at most 4 × 64 MB)."""
    return _own_weights(config.own_weights)


@sized_cache(max_entries=4, max_mb=160)
def _own_weights(own: OwnWeights) -> AttentionWeights:
    return own_road.own_weights(Config.of(own_weights=own))


def get_weights_file(config: Config) -> bytes:
    """The own weights of ``config`` as .safetensors bytes (for the download button; at most the upload limit)."""
    return _weights_file(config.own_weights)


@sized_cache(max_entries=8, max_mb=40)
def _weights_file(own: OwnWeights) -> bytes:
    return save_weights(_own_weights(own))


def tokens_of(config: Config, text: str) -> Tokens:
    """The text's tokens with this config's model (for a second sentence)."""
    return pipeline.encode(model_of(config), text)[0] if not config.own else get_own(config, text)[0]

"""The dashboard's caches over the pipeline: plain values in, what the pipeline returns out; nothing drawn.

The model is shared read-only by every session (ui/model_store.py); everything else is in caches that
hold their caps in entries and bytes (ui/memo.py: a value larger than its cache is computed, shown and
dropped), so memory levels off however many texts people try and whatever they ask for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from mha_viz.config import Config
from mha_viz.figures.common import OVERVIEW_TILE
from mha_viz.own import save_weights
from mha_viz.pipeline import own_road
from mha_viz.pipeline import road as pipeline
from mha_viz.pipeline.road import Call, LoadedModel, Tokens
from mha_viz.runtime.allocator import tune_allocator
from mha_viz.runtime.threads import adapt_now
from mha_viz.studies import sweeps as studies
from mha_viz.trace import AttentionTrace, AttentionWeights, MhaVizError
from mha_viz.ui.guard import unchecked, watch_model
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.model_store import ModelStore
from mha_viz.ui.pass_budget import admitted_pass

tune_allocator()  # the app's process: big arrays go back to the system when freed


@dataclass(frozen=True)
class Base:
    """What every view needs to know about the chosen model, attention kind and text."""

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


MODELS: ModelStore[LoadedModel] = ModelStore(max_entries=3)


def get_model(model_name: str, device: str) -> LoadedModel:
    """The bundled model ("") or a hub id/folder, loaded once per process and shared (ui/model_store.py: not a
    Streamlit cache, so no client can drop it; a dropped model is freed)."""

    def load() -> LoadedModel:
        with unchecked():  # a load finishes even if its page is gone: the next visitor wants the model
            lm = pipeline.load(Config(model=model_name, device=device))
        watch_model(lm.model)  # a page whose client left stops within one module (ui/guard.py)
        return lm

    return MODELS.get((model_name, device), load)


def model_of(config: Config) -> LoadedModel:
    return get_model(config.model_name, config.model_device)


@sized_cache(max_entries=16, max_mb=256)
def get_recording(model_name: str, device: str, text: str, target: str | None) -> pipeline.Recording:
    """One model pass over the text (and target), every attention call recorded (a long text's with the
    Overview's tiles: get_pooled_patterns then needs no second look at every layer). A progress bar set with
    recording_progress() is told each recorded layer. Admitted like a view's work (ui/pass_budget.py)."""
    lm, told = get_model(model_name, device), _pass_progress()
    with admitted_pass(lm, text, target):
        return pipeline.record(lm, text, target, tile_cells=OVERVIEW_TILE, progress=told)


_PROGRESS: ContextVar[Callable[[int, int], None] | None] = ContextVar("mha_viz_progress", default=None)
_FIRST: ContextVar[tuple[tuple, pipeline.Recording] | None] = ContextVar("mha_viz_first_layer", default=None)


def _pass_progress() -> Callable[[int, int], None] | None:
    """The recording_progress() bar's callback for a pass about to run (a cache miss), torch's threads chosen first
    by a fresh look at the machine (runtime.threads.adapt_now: the last look saw the browser drawing the last page)."""
    told = _PROGRESS.get()
    if told is not None:
        adapt_now()
    return told


def is_recorded(config: Config, text: str, target: str | None) -> bool:
    """Whether the model's whole recorded pass over the text is in the cache (nothing is computed)."""
    return get_recording.holds(config.model_name, config.model_device, text, target)


def long_unrecorded(config: Config, text: str, target: str | None) -> bool:
    """A long text (a slim recording) whose whole pass is not recorded yet: worth drawing one layer first."""
    if config.own or target or is_recorded(config, text, target):
        return False
    try:
        return pipeline.is_slim(model_of(config), text, target)
    except MhaVizError:  # an empty text, say: the page's own calls say so
        return False


@sized_cache(max_entries=2, max_mb=192)
def get_first_layer(model_name: str, device: str, text: str, part: str | None, layer: int) -> pipeline.Recording:
    """A long text's shown layer alone, recorded whole (pipeline.record_layer), for the page that draws it first
    (told to the recording_progress() bar, if any); admitted like the whole pass."""
    lm = get_model(model_name, device)
    with admitted_pass(lm, text, timed=False):
        return pipeline.record_layer(lm, text, part, layer, progress=_pass_progress())


@contextmanager
def first_layer(config: Config, text: str, part: str, layer: int) -> Iterator[None]:
    """Inside the block, the one-layer callers (get_base, get_trace, whole_layer) read a long text's ``layer`` from
    its partial recording (get_first_layer) instead of waiting for the whole pass; every other caller still gets
    the whole recording (recording_of without ``layer``), so nothing that needs every layer sees a partial one."""
    rec = get_first_layer(config.model_name, config.model_device, text, part, layer)
    token = _FIRST.set(((config.model_name, config.model_device, text), rec))
    try:
        yield
    finally:
        _FIRST.reset(token)


def provisional() -> bool:
    """Whether this run draws a long text's first layer before the whole pass is recorded (found_head waits)."""
    return _FIRST.get() is not None


@contextmanager
def recording_progress(told: Callable[[int, int], None]) -> Iterator[None]:
    """get_recording and get_first_layer call ``told(done, total)`` after each layer inside the block."""
    token = _PROGRESS.set(told)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def recording_of(
    config: Config, text: str, target: str | None, layer: tuple[str, int] | None = None
) -> pipeline.Recording:
    """The model's recorded pass. Own weights have none: a view that asks for one would draw the bundled model
    under an "own weights" caption, so it is refused here, where every such view passes (see own_patterns).
    ``layer`` (part, layer): the caller reads only that call, so inside first_layer() a long text's partial
    recording of it will do."""
    if config.own:
        raise MhaVizError("This view needs a pretrained model's recorded pass; own weights are one layer: choose "
                          "a pretrained model in the sidebar for it.")  # fmt: skip
    first = _FIRST.get()
    if first is not None and first[0] == (config.model_name, config.model_device, text) and layer in first[1].run.calls:
        return first[1]
    return get_recording(config.model_name, config.model_device, text, target)


def own_patterns(config: Config, text: str, measure: str = "weight") -> np.ndarray:
    """Own weights' one layer as "every layer": what get_all_patterns and the long-text readers return for a
    pretrained model. Shapes: [1, H, n, n] float32."""
    from mha_viz.analysis.norms import shown_pattern

    return shown_pattern(get_trace(config, text, None, None, 0), measure)[None]


@sized_cache(max_entries=8, max_mb=64)
def get_own(config: Config, text: str) -> tuple[Tokens, AttentionTrace]:
    tokens, _, trace = own_road.own_trace(model_of(config), text, config)
    return tokens, trace


def get_base(config: Config, text: str, target: str | None, part: str | None, layer: int) -> Base:
    if config.own:  # sizes only: the trace itself waits until the view's budget is checked
        tokens = own_road.own_tokens(model_of(config), text, config)
        w = get_own_weights(config)
        return Base(tokens, tokens, "encoder", ("encoder",), 1, w.n_heads, w.n_kv_heads, w.d_head, w.d_model, False,
                    True, "own weights", True)  # fmt: skip
    lm = model_of(config)
    part = lm.part(part)
    rec = recording_of(config, text, target, (part, layer))
    site = lm.site(part, layer)
    call = rec.run.calls[(part, layer)]
    return Base(
        rec.query_tokens(part), rec.key_tokens(part), part, lm.parts, lm.n_layers(part), int(call.q.shape[1]),
        int(call.k.shape[1]), int(call.q.shape[-1]), pipeline.d_model(rec), site.causal, bool(site.qkv),
        lm.name, False,
    )  # fmt: skip


def get_trace(
    config: Config, text: str, target: str | None, part: str | None, layer: int, x: bool = True
) -> AttentionTrace:
    """The traced layer after the what-if edits in ``config``. ``x`` False: a view that shows only weights does not
    need a long text's X (pipeline.layer_trace); short texts always have it (one cache entry either way)."""
    whole = x or config.own or not recording_of(config, text, target, (model_of(config).part(part), layer)).slim
    return _get_trace(config, text, target, part, layer, whole)


@sized_cache(max_entries=64, max_mb=256)
def _get_trace(config: Config, text: str, target: str | None, part: str | None, layer: int, x: bool) -> AttentionTrace:
    if config.own:
        return get_own(config, text)[1]
    lm = model_of(config)
    if x:
        rec = whole_layer(config, text, target, part, layer)
    else:
        rec = recording_of(config, text, target, (lm.part(part), layer))
    return pipeline.layer_trace(lm, rec, part, layer, config, x=x)


@sized_cache(max_entries=4, max_mb=128)
def get_layer_call(config: Config, text: str, target: str | None, part: str, layer: int) -> Call:
    """One layer's whole call (X, W^O in and out, pre-rotary q and k) of a slim recording: the model run as
    far as this layer, once per layer (at 2048 tokens of SmolLM2, ~30 MB)."""
    return pipeline.layer_call(model_of(config), recording_of(config, text, target), part, layer)


def whole_layer(config: Config, text: str, target: str | None, part: str | None, layer: int) -> pipeline.Recording:
    """The recording with ``layer`` whole (a short text's recording is whole already)."""
    part = model_of(config).part(part)
    rec = recording_of(config, text, target, (part, layer))
    if not rec.slim or rec.partial:  # a partial recording's one call is whole already
        return rec
    return pipeline.with_call(rec, part, layer, get_layer_call(config, text, target, part, layer))


@sized_cache(max_entries=16, max_mb=192)
def get_all_patterns(
    config: Config, text: str, target: str | None, part: str | None, measure: str = "weight"
) -> np.ndarray:
    """Every layer's pattern of one part (weights, or contribution shares). Shapes: [L, H, q_pos, k_pos] float32."""
    if config.own:
        return own_patterns(config, text, measure)
    lm = model_of(config)
    return studies.all_patterns(lm, recording_of(config, text, target), part, config, measure)


@sized_cache(max_entries=4, max_mb=160)
def get_own_weights(config: Config) -> AttentionWeights:
    """Own weights (made or loaded once per config; at most 4 × 64 MB)."""
    return own_road.own_weights(config)


@sized_cache(max_entries=8, max_mb=40)
def get_weights_file(config: Config) -> bytes:
    """The own weights of ``config`` as .safetensors bytes (for the download button; at most the upload limit)."""
    return save_weights(get_own_weights(config))


def tokens_of(config: Config, text: str) -> Tokens:
    """The text's tokens with this config's model (for a second sentence)."""
    return pipeline.encode(model_of(config), text)[0] if not config.own else get_own(config, text)[0]

"""The dashboard's caches of the model and its recorded pass (ui/cache.py re-exports all of it): the model loaded once
per process and shared read-only (ui/model_store.py), one recorded pass per text, and a long text's shown layer
recorded first (first_layer(), provisional()) with the recording's progress told to a bar (recording_progress()).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from mha_viz.config import Config
from mha_viz.figures.common import OVERVIEW_TILE
from mha_viz.pipeline import road as pipeline
from mha_viz.pipeline.pool_ahead import pages_running
from mha_viz.pipeline.road import LoadedModel
from mha_viz.runtime.allocator import tune_allocator
from mha_viz.runtime.threads import adapt_now, one_thread
from mha_viz.selection import Selection
from mha_viz.trace import MhaVizError
from mha_viz.ui.guard import unchecked, watch_model
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.model_store import ModelStore
from mha_viz.ui.pass_budget import admitted_pass

tune_allocator()  # the app's process: big arrays go back to the system when freed

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


@sized_cache(max_entries=16, max_mb=1536)  # SmolLM2's 8,192-token (slim, tiled) recording is ~1 GB: kept, not redone
def get_recording(model_name: str, device: str, text: str, target: str | None) -> pipeline.Recording:
    """One model pass over the text (and target), every attention call recorded (a long text's with the
    Overview's tiles: get_pooled_patterns then needs no second look at every layer). A progress bar set with
    recording_progress() is told each recorded layer. Admitted like a view's work (ui/pass_budget.py)."""
    lm, told = get_model(model_name, device), _pass_progress()
    with admitted_pass(lm, text, target), _shared_cores(told is None):
        return pipeline.record(lm, text, target, tile_cells=OVERVIEW_TILE, progress=told)


def _shared_cores(short: bool) -> contextlib.AbstractContextManager:
    """A short pass (no progress bar: a long one chose its threads by adapt_now) on one torch thread while other page
    runs of this process are under way: their threads have the cores already, and a second thread of this pass waits
    for their time slices, spinning meanwhile (ten new sessions at once on MiniLM: ~10-15% less CPU per first page,
    issue 36 §6). Alone, it keeps every thread it is given."""
    return one_thread() if short and pages_running() > 1 else contextlib.nullcontext()


_PROGRESS: ContextVar[Callable[[int, int], None] | None] = ContextVar("mha_viz_progress", default=None)
_FIRST: ContextVar[tuple[tuple, pipeline.Recording] | None] = ContextVar("mha_viz_first_layer", default=None)


def _pass_progress() -> Callable[[int, int], None] | None:
    """The recording_progress() bar's callback for a pass about to run (a cache miss), torch's threads chosen first
    by a fresh look at the machine (runtime.threads.adapt_now: the last look saw the browser drawing the last page)."""
    told = _PROGRESS.get()
    if told is not None:
        adapt_now()
    return told


def is_recorded(sel: Selection) -> bool:
    """Whether the model's whole recorded pass over the selection's text is in the cache (nothing is computed)."""
    return get_recording.holds(*sel.recorded)


def long_unrecorded(sel: Selection) -> bool:
    """A long text (a slim recording) whose whole pass is not recorded yet: worth drawing one layer first."""
    if sel.config.own or sel.target or is_recorded(sel):
        return False
    try:
        return pipeline.is_slim(model_of(sel.config), sel.text, sel.target)
    except MhaVizError:  # an empty text, say: the page's own calls say so
        return False


def get_first_layer(sel: Selection) -> pipeline.Recording:
    """A long text's shown layer alone, recorded whole (pipeline.record_layer), for the page that draws it first
    (told to the recording_progress() bar, if any); admitted like the whole pass. Keyed by where the model comes
    from, the text, the part and the layer (not the what-ifs: the recording is the model's own)."""
    return _first_layer(Selection(Config.of(source=sel.config.source), sel.text, None, sel.part, sel.layer))


@sized_cache(max_entries=2, max_mb=192)
def _first_layer(sel: Selection) -> pipeline.Recording:
    lm = model_of(sel.config)
    with admitted_pass(lm, sel.text, timed=False):
        return pipeline.record_layer(lm, sel, progress=_pass_progress())


@contextmanager
def first_layer(sel: Selection) -> Iterator[None]:
    """Inside the block, the one-layer callers (get_base, get_trace, whole_layer) read a long text's selected layer
    from its partial recording (get_first_layer) instead of waiting for the whole pass; every other caller still
    gets the whole recording (recording_of without ``one_layer``), so nothing that needs every layer sees a partial
    one."""
    rec = get_first_layer(sel)
    token = _FIRST.set((sel.recorded[:3], rec))
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


def recording_of(sel: Selection, one_layer: bool = False) -> pipeline.Recording:
    """The model's recorded pass over the selection's text (and decoder text). Own weights have none: a view that
    asks for one would draw the bundled model under an "own weights" caption, so it is refused here, where every
    such view passes (see own_patterns). ``one_layer``: the caller reads only the selected layer's call, so inside
    first_layer() a long text's partial recording of it will do."""
    if sel.config.own:
        raise MhaVizError("This view needs a pretrained model's recorded pass; own weights are one layer: choose "
                          "a pretrained model in the sidebar for it.")  # fmt: skip
    first = _FIRST.get()
    key = None if not one_layer or first is None or first[0] != sel.recorded[:3] else (sel.part, sel.layer)
    if key is not None and (model_of(sel.config).part(key[0]), key[1]) in first[1].run.calls:  # its partial one
        return first[1]
    return get_recording(*sel.recorded)

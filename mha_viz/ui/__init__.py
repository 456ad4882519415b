"""The Streamlit dashboard: the only package that imports streamlit. Entry point: main()."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import streamlit as st

from mha_viz.models.sources import allowed_models
from mha_viz.pipeline.pool_ahead import page_running
from mha_viz.pipeline.road import cut_notice, smollm2_dir, smollm2_ready
from mha_viz.runtime.allocator import release_memory
from mha_viz.runtime.threads import adapt
from mha_viz.ui.cache import (
    first_layer,
    get_base,
    is_recorded,
    long_unrecorded,
    model_of,
    provisional,
    recording_of,
    recording_progress,
)
from mha_viz.ui.common import recording_figures
from mha_viz.ui.context import Ctx, unmet
from mha_viz.ui.errors import guarded
from mha_viz.ui.found import found_head
from mha_viz.ui.html_download import html_button
from mha_viz.ui.long_cancel import cancel_button, cancel_key, cancelled, cancelled_notice
from mha_viz.ui.memo import collect_garbage, drop_held
from mha_viz.ui.navigation import navigation, to_tab, wanted_view
from mha_viz.ui.opened import follow_model
from mha_viz.ui.pool_ahead import pool_ahead
from mha_viz.ui.registry import BY_NAME, REGISTRY
from mha_viz.ui.sidebar import (
    GROUP_OF,
    IGNORED,
    VIEWS,
    Controls,
    check_choice,
    check_text,
    layer_control,
    mask_controls,
    part_control,
    plain,
    selection,
    show_ignored,
    sidebar,
)
from mha_viz.ui.timing import timed_run
from mha_viz.ui.views.wo import WO_MODES
from mha_viz.ui.warm import preload_plotly, start_model_load

__all__ = ["guarded", "main", "plain"]
log = logging.getLogger("mha_viz")
VIEW_FUNCS: dict[str, Callable[[Ctx], None]] = {v.name: v.run() for v in REGISTRY}  # every view, from the registry
PAGE_TITLE, PAGE_HEADER = "mha-viz: multi-head attention", "mha-viz · multi-head attention, made visible"


def _context(c: Controls, stack: contextlib.ExitStack) -> Ctx | None:
    """The model, layer and text every view reads. A long text not recorded yet, on Heads: ``stack`` holds the
    first_layer() block, in which the views read that layer from a pass run only as far as it (_record_rest
    records the rest after the view is drawn)."""
    if c.kind == "hub" and not c.config.model:
        allowed = allowed_models()
        st.info(
            "Enter a Hugging Face model id (e.g. bert-base-uncased, gpt2, t5-small) or a local folder in the sidebar."
            if allowed is None
            else plain(f"Enter one of the models this server offers in the sidebar: {', '.join(allowed)}.")
        )
        return None
    name = c.config.model if c.kind == "hub" else "the bundled model"
    if c.kind == "smollm2" and not smollm2_ready():
        bar = st.progress(0.0, text="Preparing the bundled SmolLM2 (once)")
        guarded(lambda: smollm2_dir(lambda f, what: bar.progress(f, text=what)))
        bar.empty()
    with _spinner(f"Loading {name}…", not _loaded(c)):
        lm = guarded(lambda: model_of(c.config))
    if lm is None:
        return None
    c = mask_controls(c, decoder=not c.config.own and lm.causal)
    part, target = ("encoder", None) if c.config.own else part_control(c, lm.parts, lm.encoder_decoder)
    n_layers = 1 if c.config.own else lm.n_layers(part)  # opens on the found head's layer when nothing names one
    find = lambda: found_head(selection(c, part, target))  # whatever the layer: before the layer is picked
    follow_model(c, lm.name, n_layers, find)  # another model: its own found head, never the layer of the one before
    layer = layer_control(c, n_layers, lambda: getattr(find(), "layer", 0))
    sel = selection(c, part, target, layer)  # the one request value: every view and cache below takes it
    guarded(lambda: pool_ahead(sel))  # a long recording's maps computed ahead; another text's job stopped
    long = long_unrecorded(sel)
    stop = cancel_key(c.config, c.text, target)
    if long and cancelled(stop):  # Cancel was clicked during this text's recording: said, not started again
        cancelled_notice(lm.name)
        return None
    if long and wanted_view() == "Heads":  # the shown layer first
        with _layers_counted(st.empty(), f"Running {lm.name} as far as layer {layer} (the other layers follow)",
                             (stop, "first")):  # fmt: skip
            guarded(lambda: stack.enter_context(first_layer(sel)))
        if not provisional():  # it failed, and said why
            return None
    whole = long and not provisional()  # another view: the whole pass now, its layers counted
    what = f"Recording every layer of {lm.name} for this text"
    counted = _layers_counted(st.empty(), what, (stop, "whole")) if whole else None
    with _spinner("Computing…", c.config.own or not is_recorded(sel)), counted or contextlib.nullcontext():
        base = guarded(lambda: get_base(sel))
    if base is None:
        return None
    for tokens in {id(t): t for t in (base.tokens, base.key_tokens) if t.cut}.values():  # what was cut, once
        text = c.text if tokens.cut.what == "text" else target
        st.warning(plain(cut_notice(tokens.cut, "word tokens" if tokens.cut.unit == "words" else lm.name, text)))
    return Ctx(c=c, sel=sel, base=base)


def _loaded(c: Controls) -> bool:
    from mha_viz.ui.cache_pass import MODELS

    return (c.config.model_name, c.config.model_device) in MODELS.keys()  # noqa: SIM118 (a ModelStore, no `in`)


def _spinner(text: str, slow: bool) -> contextlib.AbstractContextManager:
    """st.spinner where the block may take a while (a model not loaded yet, a pass not recorded yet); none where it
    reads caches: each st.spinner starts a thread and sends a message, ~4 ms of a page's GIL with ten at once."""
    return st.spinner(text) if slow else contextlib.nullcontext()


def main() -> None:
    with timed_run("page"), page_running():  # a long recording's maps computed ahead wait for the page
        _main()


def _main() -> None:
    st.set_page_config(page_title=PAGE_TITLE, layout="wide")
    collect_garbage()  # what earlier runs left in reference cycles
    adapt()  # torch's threads: the cores other processes leave free (a busy machine), unless the count is fixed
    start_model_load()  # a cold server: the bundled model loads while the sidebar is drawn
    preload = preload_plotly()  # the browser fetches Plotly's code meanwhile
    st.session_state[IGNORED] = {}  # link values this run could not use, shown once at the top
    try:
        c = guarded(sidebar)  # a failing control is a message, never a traceback
        st.subheader(PAGE_HEADER)
        notice = st.container()
        try:
            if isinstance(c, Controls):
                _page(c)
        finally:
            show_ignored(notice)
    finally:
        st.session_state.pop(IGNORED, None)
        if preload is not None:
            preload.empty()


def _page(c: Controls) -> None:
    from mha_viz.ui.links import check_refused_link

    check_refused_link()  # a link Streamlit read none of: said, not dropped silently
    progress = st.empty()  # a long text's progress, at the top: the other layers recorded after the first is drawn
    with contextlib.ExitStack() as stack:
        ctx = _context(c, stack)
        if ctx is not None:
            _views(ctx)
        early = provisional()
    if ctx is not None and early:
        _record_rest(ctx, progress)


def _record_rest(ctx: Ctx, slot: st.delta_generator.DeltaGenerator) -> None:
    """A long text drawn from its first layer: record the whole pass now, with the layers counted in a progress
    bar, then run the page again (the found head, the Overview's tiles and every other view need every layer)."""
    what = f"Recording every layer of {ctx.base.model_name} (for the found head, the role labels and the other views)"
    with _layers_counted(slot, what, (cancel_key(ctx.config, ctx.text, ctx.target), "rest")):
        rec = guarded(lambda: recording_of(ctx.sel))
    if rec is None:
        return
    if is_recorded(ctx.sel):
        st.rerun()
    slot.info(  # held for this run only: running the page again would record it again, and again
        "This text's recording is larger than the server keeps, so the found head and the views that read every "
        "layer record it again when they open. A shorter text keeps it."
    )


@contextlib.contextmanager
def _layers_counted(
    slot: st.delta_generator.DeltaGenerator, what: str, stop: tuple[str, str] | None = None
) -> Iterator[None]:
    """A progress bar in ``slot`` that a long text's pass inside the block moves layer by layer (emptied after).
    torch's threads are chosen again after each layer (runtime.threads.adapt; the pass itself starts with a fresh
    look, ui.cache): the browser drawing the page beside it is busy for a moment, not for the whole pass."""
    box = slot.container()
    bar = box.progress(0.0, text=f"{what}…")
    if stop is not None:  # (cancel_key, tag): a Cancel button under the bar (ui/long_cancel.py)
        cancel_button(box, *stop)

    def told(done: int, total: int) -> None:
        adapt()
        bar.progress(min(1.0, done / total), text=f"{what}: layer {done} of {total}…")

    try:
        with recording_progress(told):
            yield
    finally:
        slot.empty()


VIEW_PANEL = "view_panel"  # the open view's container (CSS class st-key-view_panel: the browser tests find it)


def _views(ctx: Ctx) -> None:
    from mha_viz.config import MAX_SECOND_TEXT_CHARS

    check_choice("view", list(VIEWS), VIEWS[0], "the views are")
    check_choice("wo_mode", list(WO_MODES.values()), next(iter(WO_MODES.values())), "W^O can be")
    check_text("text_b", MAX_SECOND_TEXT_CHARS)  # the Two sentences box's own limit
    view, views = navigation()
    key = f"view_tab_{GROUP_OF[view]}"
    st.session_state[key] = view  # the group's tabs open on the view, whoever chose it
    # The tab bar only picks the view; the view is drawn below it, not inside its panel: a chart inside a panel was
    # drawn again by the browser in the hidden old panel on every switch (docs/tab-speed.md).
    st.tabs(list(views), key=key, default=view, on_change=to_tab, args=(key,))
    with st.container(key=VIEW_PANEL), st.spinner("Computing…"):
        guarded(lambda: _run_view(view, ctx))
    drop_held()
    release_memory()


def _run_view(name: str, ctx: Ctx) -> None:
    """A view, after its memory (and in hosted mode its time) estimate is checked against the request budget,
    admitted against the process budget while it runs, and cut if it runs past the time limit (ui/request.py)."""
    from mha_viz.ui.request import admitted

    if unmet(BY_NAME[name], ctx):  # e.g. own weights in a view that looks across a pretrained model's layers
        return
    with admitted(name, ctx), recording_figures() as drawn:
        VIEW_FUNCS[name](ctx)
    html_button(name, ctx, drawn)

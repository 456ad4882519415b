"""The Streamlit dashboard: the only package that imports streamlit. Entry point: main()."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import streamlit as st

from mha_viz.trace import MhaVizError
from mha_viz.ui.cache import get_base, model_of
from mha_viz.ui.context import Ctx
from mha_viz.ui.sidebar import VIEWS, Controls, layer_control, part_control, sidebar
from mha_viz.ui.views import (
    ablation_view,
    compare_view,
    headcount_view,
    heads_view,
    overview_view,
    roles_view,
    rollout_view,
    step_view,
    two_view,
    where_view,
    wo_view,
)

log = logging.getLogger("mha_viz")
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>$~:])")
VIEW_FUNCS: dict[str, Callable[[Ctx], None]] = {
    "Heads": heads_view,
    "Compare heads": compare_view,
    "Head roles": roles_view,
    "Where does it look?": where_view,
    "Two sentences": two_view,
    "Head count": headcount_view,
    "W^O": wo_view,
    "Ablation": ablation_view,
    "Rollout": rollout_view,
    "Step by step": step_view,
    "Overview": overview_view,
}


def plain(text: object) -> str:
    """Text shown as typed: markdown characters escaped (messages may quote user input)."""
    return _MARKDOWN.sub(r"\\\1", str(text))


def guarded(fn: Callable[[], object]) -> object | None:
    """Run ``fn``; show a person-readable st.error instead of a traceback if it fails."""
    try:
        return fn()
    except MhaVizError as exc:
        st.error(plain(exc))
    except Exception as exc:
        log.exception("unexpected error")
        st.error(plain(f"Something went wrong ({type(exc).__name__}: {exc}). Try other settings or a shorter text."))
    return None


def _context(c: Controls) -> Ctx | None:
    if c.kind == "hub" and not c.config.model:
        st.info(
            "Enter a Hugging Face model id (e.g. bert-base-uncased, gpt2, t5-small) or a local folder in the sidebar."
        )
        return None
    name = c.config.model if c.kind == "hub" else "the bundled model"
    with st.spinner(f"Loading {name}…"):
        lm = guarded(lambda: model_of(c.config))
    if lm is None:
        return None
    part, target = ("encoder", None) if c.config.own else part_control(c, lm.parts, lm.encoder_decoder)
    layer = layer_control(c, 1 if c.config.own else lm.n_layers(part))
    with st.spinner("Computing…"):
        base = guarded(lambda: get_base(c.config, c.text, target, part, layer))
    if base is None:
        return None
    return Ctx(c=c, layer=layer, part=part, target=target, base=base)


def main() -> None:
    st.set_page_config(page_title="mha-viz: multi-head attention", layout="wide")
    c = sidebar()
    st.subheader("mha-viz · multi-head attention, made visible")
    ctx = _context(c)
    if ctx is None:
        return
    tabs = st.tabs(list(VIEWS), key="view", bind="query-params")
    for name, tab in zip(VIEWS, tabs, strict=True):
        if tab.open:
            with tab, st.spinner("Computing…"):
                guarded(lambda name=name: VIEW_FUNCS[name](ctx))

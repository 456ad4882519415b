"""The Streamlit dashboard: the only package that imports streamlit. Entry point: main()."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import streamlit as st

from mha_viz.pipeline import Settings
from mha_viz.trace import MhaVizError
from mha_viz.ui.compute import get_base, get_model
from mha_viz.ui.deeper import ablation_view, roles_view, rollout_view, two_view, where_view
from mha_viz.ui.sidebar import VIEWS, Controls, layer_control, sidebar
from mha_viz.ui.views import Ctx, compare_view, heads_view, overview_view
from mha_viz.ui.whatif import headcount_view, step_view, wo_view

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
    if c.src.kind == "hub" and not c.src.model_id:
        st.info("Enter a Hugging Face model id (e.g. bert-base-uncased, distilgpt2) or a local folder in the sidebar.")
        return None
    name = c.src.model_id if c.src.kind == "hub" else "the bundled model"
    with st.spinner(f"Loading {name}…"):
        lm = guarded(lambda: get_model(c.src.model_id if c.src.kind == "hub" else "", c.src.device))
    if lm is None:
        return None
    layer = layer_control(c, 1 if c.src.own else lm.n_layers)
    with st.spinner("Computing…"):
        base = guarded(lambda: get_base(c.src, c.text, layer))
    if base is None:
        return None
    return Ctx(c=c, layer=layer, base=base, settings=Settings(causal=c.causal, scaled=c.scaled, device=c.src.device))


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

"""The Streamlit dashboard: the only module that imports streamlit.

Cached wrappers take plain values (model name, text, layer), so the cache keys are obvious; the
model is shared read-only by every session (st.cache_resource), traces are bounded (st.cache_data).
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.figures import heads_grid
from mha_viz.loading import DEFAULT_MODEL, LoadedModel, load_model
from mha_viz.pipeline import Settings, pretrained_traces
from mha_viz.trace import MhaVizError

DEFAULT_TEXT = "The animal didn't cross the street because it was too tired"


@st.cache_resource(show_spinner=False, max_entries=4)
def cached_model(name: str | None) -> LoadedModel:
    return load_model(name, "cpu")


@st.cache_data(show_spinner=False, max_entries=64)
def cached_pattern(name: str | None, text: str, layer: int) -> tuple[tuple[str, ...], np.ndarray]:
    """(token labels, pattern [n_heads, pos, pos] float32) of one layer."""
    tokens, (trace,) = pretrained_traces(cached_model(name), text, [layer], Settings(device="cpu"))
    return tokens.labels, trace.pattern.numpy().astype(np.float32)


def main() -> None:
    st.set_page_config(page_title="mha-viz", layout="wide")
    st.title("mha-viz: multi-head attention, made visible")
    text = st.sidebar.text_input("Text", DEFAULT_TEXT, max_chars=2000)
    with st.spinner(f"Loading {DEFAULT_MODEL}…"):
        try:
            lm = cached_model(None)
        except MhaVizError as exc:
            st.error(f"The model could not be loaded: {exc}")
            return
    layer = st.sidebar.selectbox("Layer", list(range(lm.n_layers)), index=0)
    try:
        tokens, pattern = cached_pattern(None, text, int(layer))
    except MhaVizError as exc:
        st.error(str(exc))
        return
    st.caption(f"{DEFAULT_MODEL}: layer {layer}, {pattern.shape[0]} heads, {len(tokens)} tokens")
    st.plotly_chart(heads_grid(pattern, tokens, f"Attention weights, layer {layer}"), width="stretch")

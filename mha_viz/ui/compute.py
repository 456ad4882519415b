"""Cached computations for the dashboard. Functions take plain values (so cache keys are obvious)
and never draw. The model is shared read-only by every session (st.cache_resource); everything
else is in st.cache_data caches bounded by entries and by size, so memory levels off however many
texts people try (a 512-token trace of MiniLM is about 40 MB).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st
import torch

from mha_viz.adapters import layer_weights, run_model
from mha_viz.attention import compute_trace
from mha_viz.edits import divisors
from mha_viz.loading import LoadedModel, Tokens, load_model, tokenize
from mha_viz.own import load_weights, save_weights
from mha_viz.pipeline import (
    OwnSpec,
    Settings,
    ablation_effect,
    edit_weights,
    headcount_sweep,
    own_input,
    roles_table,
    single_head_identity_check,
)
from mha_viz.trace import AttentionTrace, AttentionWeights

MAX_SWEEP_HEADS = 64  # the head-count explorer offers divisors up to this many heads


@dataclass(frozen=True)
class Source:
    """Where the layer comes from: the bundled model, a hub id/folder, or own weights."""

    kind: str = "bundled"  # "bundled" | "hub" | "own"
    model_id: str = ""
    device: str = "cpu"
    d_model: int = 512
    n_heads: int = 8
    seed: int = 0
    init: str = "xavier"
    embeddings: str = "random"
    positions: bool = False
    weights_file: bytes | None = None  # uploaded own weights (.safetensors)

    @property
    def own(self) -> bool:
        return self.kind == "own"

    def own_spec(self) -> OwnSpec:
        weights = load_weights(self.weights_file) if self.weights_file else None
        return OwnSpec(
            d_model=self.d_model,
            n_heads=self.n_heads,
            seed=self.seed,
            init=self.init,
            embeddings=self.embeddings,
            positions=self.positions,
            weights=weights,
        )


@dataclass(frozen=True)
class Base:
    """The unedited layer for one (source, text, layer): its tokens, input X and weights."""

    tokens: Tokens
    x: torch.Tensor  # [pos, d_model]
    weights: AttentionWeights
    causal: bool  # the model itself is causal (GPT-2)
    n_layers: int
    model_name: str


@st.cache_resource(show_spinner=False, max_entries=3)
def get_model(model_id: str, device: str) -> LoadedModel:
    """The bundled model ("" id) or a hub id/folder, loaded once per process and shared."""
    return load_model(model_id or None, device)


def _model_for(src: Source) -> LoadedModel:
    return get_model(src.model_id if src.kind == "hub" else "", src.device if src.kind != "own" else "cpu")


@st.cache_data(show_spinner=False, max_entries=32, max_size="64MB")
def get_run(src: Source, text: str) -> tuple[Tokens, list[torch.Tensor]]:
    """Tokens and every layer's attention input X for one text (one model forward pass)."""
    lm = _model_for(src)
    tokens = tokenize(lm, text)
    run = run_model(lm, torch.tensor([tokens.ids]))
    return tokens, [x[0] for x in run.attn_inputs]


@st.cache_data(show_spinner=False, max_entries=32, max_size="96MB")
def get_base(src: Source, text: str, layer: int) -> Base:
    lm = _model_for(src)
    if src.own:
        tokens = tokenize(lm, text)
        spec = src.own_spec()
        weights = spec.build()
        x = own_input(lm, tokens, spec, weights.d_model)
        return Base(tokens, x, weights, causal=False, n_layers=1, model_name="own weights")
    tokens, xs = get_run(src, text)
    return Base(tokens, xs[layer], layer_weights(lm, layer), lm.causal, lm.n_layers, lm.name)


def _trace(src: Source, text: str, layer: int, settings: Settings) -> AttentionTrace:
    b = get_base(src, text, layer)
    return compute_trace(
        edit_weights(b.weights, settings), b.x, b.tokens.labels,
        causal=b.causal or settings.causal, scaled=settings.scaled, device=settings.device, dtype=settings.dtype,
    )  # fmt: skip


@st.cache_data(show_spinner=False, max_entries=64, max_size="256MB")
def get_trace(src: Source, text: str, layer: int, settings: Settings) -> AttentionTrace:
    """The traced layer after the what-if edits in ``settings``."""
    return _trace(src, text, layer, settings)


@st.cache_data(show_spinner=False, max_entries=16, max_size="192MB")
def get_all_patterns(src: Source, text: str, settings: Settings, n_layers: int) -> np.ndarray:
    """Every layer's pattern (only the patterns are kept). Shapes: [n_layers, n_heads, pos, pos] float32."""
    return np.stack([_trace(src, text, i, settings).pattern.numpy() for i in range(n_layers)]).astype(np.float32)


def sweep_counts(width: int) -> list[int]:
    return [h for h in divisors(width) if h <= MAX_SWEEP_HEADS]


@st.cache_data(show_spinner=False, max_entries=16, max_size="16MB")
def get_sweep(src: Source, text: str, layer: int, settings: Settings) -> dict[str, list[float]]:
    b = get_base(src, text, layer)
    counts = sweep_counts(b.weights.n_heads * b.weights.d_head)
    return headcount_sweep(b.weights, b.x, counts, Settings(causal=b.causal or settings.causal, scaled=settings.scaled))


@st.cache_data(show_spinner=False, max_entries=16)
def get_identity_check(src: Source, text: str, layer: int) -> float:
    b = get_base(src, text, layer)
    return single_head_identity_check(b.weights, b.x)


@st.cache_data(show_spinner=False, max_entries=16, max_size="16MB")
def get_roles(src: Source, text: str, settings: Settings, n_layers: int) -> list[dict]:
    """Role scores and labels for every layer × head (see analysis.head_roles)."""
    tokens, _ = get_run(src, text)
    return roles_table(tokens, get_all_patterns(src, text, settings, n_layers))


@st.cache_data(show_spinner=False, max_entries=16, max_size="32MB")
def get_ablation(src: Source, text: str, plan: tuple[tuple[int, tuple[int, ...]], ...]) -> dict:
    """The whole model's output with heads zeroed: plan = ((layer, (heads...)), ...)."""
    return ablation_effect(_model_for(src), text, {la: list(hs) for la, hs in plan})


@st.cache_data(show_spinner=False, max_entries=8, max_size="64MB")
def get_weights_file(src: Source) -> bytes:
    """The own weights of ``src`` as .safetensors bytes (for the download button)."""
    return save_weights(src.own_spec().build())

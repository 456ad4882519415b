"""The dashboard's caches over the studies: the head-count sweep, the Lesson's claims, role scores, ablation,
circuits and head importance. Each reads the recording and traces through ui.cache (plain values in, what the
study returns out; nothing drawn), in caches that hold their caps in entries and bytes (ui/memo.py)."""

from __future__ import annotations

import numpy as np
import torch

from mha_viz.config import MAX_SWEEP_HEADS, Config, OwnWeights, Source, WhatIfs
from mha_viz.edits import divisors
from mha_viz.pipeline import own_road
from mha_viz.pipeline import road as pipeline
from mha_viz.selection import Selection
from mha_viz.studies import circuit_report, circuits, claims, importance
from mha_viz.studies import sweeps as studies
from mha_viz.trace import AttentionWeights
from mha_viz.ui.cache import (
    get_all_patterns,
    get_own_weights,
    get_trace,
    model_of,
    recording_of,
    tokens_of,
    whole_layer,
)
from mha_viz.ui.memo import CACHES, SizedCache, sized_cache


def sweep_counts(width: int) -> list[int]:
    return [h for h in divisors(width) if h <= MAX_SWEEP_HEADS]


def _plain_layer(sel: Selection) -> tuple[AttentionWeights, torch.Tensor]:
    """(weights, X [n, d_model]) of a plain-linear layer (own weights: the whole layer)."""
    config = sel.config
    if config.own:
        w = get_plain_weights(sel)
        return w, own_road.own_input(model_of(config), sel.text, config, w.d_model)[1]
    at = pipeline.layer_of(model_of(config), whole_layer(sel), sel)
    return get_plain_weights(sel, at), pipeline.call_input(at.call)


@sized_cache(max_entries=16, max_mb=16)
def get_sweep(sel: Selection) -> dict[str, list[float]]:
    weights, x = _plain_layer(sel)
    counts = sweep_counts(weights.n_heads * weights.d_head)
    masks = WhatIfs(causal=sel.config.causal, scaled=sel.config.scaled)  # only the masks and scaling of the what-ifs
    return studies.headcount_sweep(weights, x, counts, Config.of(source=sel.config.source, what_ifs=masks))


@sized_cache(max_entries=16, max_mb=64)
def get_identity_pair(sel: Selection) -> claims.Equivalence:
    """Claim (b) on a plain layer: h = 1 with W^O = I against plain self-attention, with the sidebar's scaling
    and the layer's mask."""
    weights, x = _plain_layer(sel)
    allowed = torch.isfinite(get_trace(sel).scores[0])  # [n, n]
    return claims.identity_equivalence(weights, x, scaled=sel.config.scaled,
                                       allowed=None if allowed.all() else allowed)  # fmt: skip


@sized_cache(max_entries=16, max_mb=64)
def get_loop_vs_batched(sel: Selection, plain: bool) -> claims.Equivalence:
    """Claim (a) on this layer as traced: a loop over heads against one big matrix (from X on plain layers)."""
    weights, x = _plain_layer(sel) if plain else (None, None)
    return claims.loop_vs_batched(get_trace(sel), weights, x)


PLAIN_WEIGHTS = SizedCache("plain_weights", max_entries=16, max_bytes=32 * 2**20)
CACHES.append(PLAIN_WEIGHTS)


def plain_weights_key(sel: Selection) -> tuple:
    """What a layer's plain projections depend on: where the model comes from, the part and the layer (not the
    text, not the what-ifs)."""
    part = None if sel.config.own else model_of(sel.config).part(sel.part)
    return _weights_of(sel.config), part, int(sel.layer or 0)


def get_plain_weights(sel: Selection, at: pipeline.Layer | None = None) -> AttentionWeights:
    """A plain layer's projections (the Lesson names their biases): the model's own weights, the same for every
    text, so kept once per model, part and layer (keyed by text, every new session's first page copied them out of
    the model again: ~9% of its CPU, issue 36 §6). Own weights: their one layer, as made or loaded. ``at``: the
    layer already resolved on the selection's recording (else resolved here; only its call's head counts and
    scaling are read)."""
    if sel.config.own:
        return get_own_weights(sel.config)

    def compute() -> AttentionWeights:
        layer = at or pipeline.layer_of(model_of(sel.config), recording_of(sel, one_layer=True), sel)
        return layer.weights()

    return PLAIN_WEIGHTS.get_or_compute(plain_weights_key(sel), compute)  # type: ignore[return-value]


def get_roles(sel: Selection) -> list[dict]:
    """Role scores and labels for every layer × head (see roles.head_roles), whatever the selected layer."""
    return _roles(sel.at_every_layer())


@sized_cache(max_entries=16, max_mb=16)
def _roles(sel: Selection) -> list[dict]:
    config = sel.config
    if config.own:
        tokens = tokens_of(config, sel.text)
    else:
        tokens = recording_of(sel).query_tokens(model_of(config).part(sel.part))
    return studies.roles_table(tokens, get_all_patterns(sel))


@sized_cache(max_entries=16, max_mb=32)
def get_ablation(config: Config, text: str, target: str | None, plan: tuple) -> dict:
    """The whole model's output with heads zeroed: plan = (((part, layer), (heads...)), ...)."""
    return studies.ablation_effect(model_of(config), text, {key: list(hs) for key, hs in plan}, target)


def _weights_of(config: Config) -> Source | OwnWeights:
    """What a model's weights depend on: own weights' settings, else where the model comes from (not the what-ifs)."""
    return config.own_weights if config.own else config.source


def get_head_weights(config: Config, part: str | None, layer: int) -> circuit_report.HeadWeights:
    """The layer's W_Q, W_K, W_V, W_O per head (own weights: their one layer, as made or loaded)."""
    return _head_weights(_weights_of(config), part, layer)


@sized_cache(max_entries=8, max_mb=64)
def _head_weights(of: Source | OwnWeights, part: str | None, layer: int) -> circuit_report.HeadWeights:
    if isinstance(of, OwnWeights):
        return circuit_report.own_layer_weights(own_road.own_weights(Config.of(own_weights=of)))
    return circuit_report.layer_weights(model_of(Config.of(source=of)), part, layer)


def get_copying_map(config: Config, part: str) -> np.ndarray:
    """Every head's OV copying score. Shapes: [n_layers, n_heads] (own weights: one layer)."""
    return _copying_map(_weights_of(config), part)


@sized_cache(max_entries=8, max_mb=1)
def _copying_map(of: Source | OwnWeights, part: str) -> np.ndarray:
    if isinstance(of, OwnWeights):
        return circuits.layer_copying_scores(_head_weights(of, part, 0))[None]
    return circuit_report.copying_map(model_of(Config.of(source=of)), part)


@sized_cache(max_entries=32, max_mb=4)
def get_token_pairs(sel: Selection, head: int) -> dict:
    config, part, layer = sel.config, sel.part, int(sel.layer or 0)
    if config.own:  # no vocabulary of their own: the text's tokens, as the rows of X they are given
        w = get_head_weights(config, part, layer)
        tokens, x = own_road.own_input(model_of(config), sel.text, config, int(w.W_O.shape[-1]))
        return circuit_report.text_pairs(w, head, x, tokens.ids, tokens.pieces)
    lm = model_of(config)
    ids = recording_of(sel).query_tokens(lm.part(part)).ids
    return circuit_report.token_pairs(lm, get_head_weights(config, lm.part(part), layer), head, ids)


IMPORTANCE = SizedCache("importance", max_entries=16, max_bytes=4 * 2**20)
CACHES.append(IMPORTANCE)


def _imp_key(kind: str, config: Config, texts: tuple[str, ...], target: str | None, part: str) -> tuple:
    return (kind, config.model_name, config.model_device, texts, target, part)


def has_importance(kind: str, config: Config, texts: tuple[str, ...], target: str | None, part: str) -> bool:
    """Whether the importance scan ("importance") or the pruning curve ("curve") is already computed."""
    return _imp_key(kind, config, texts, target, part) in IMPORTANCE


def get_importance(
    config: Config, texts: tuple[str, ...], target: str | None, part: str, progress: importance.Progress | None = None
) -> np.ndarray:
    """Every head's importance (see importance.head_importance), computed once per (model, texts, part)."""
    key = _imp_key("importance", config, texts, target, part)

    def compute() -> np.ndarray:
        return importance.head_importance(importance.Scorer(model_of(config), texts, part, target), progress)

    return IMPORTANCE.get_or_compute(key, compute)


def get_curve(
    config: Config, texts: tuple[str, ...], target: str | None, part: str, progress: importance.Progress | None = None
) -> dict[str, np.ndarray]:
    """The pruning curve by importance and in random orders: {"steps", "by_importance", "random" [r, k]}."""
    key = _imp_key("curve", config, texts, target, part)

    def compute() -> dict[str, np.ndarray]:
        scorer = importance.Scorer(model_of(config), texts, part, target)
        return importance.pruning_curves(scorer, get_importance(config, texts, target, part), progress)

    return IMPORTANCE.get_or_compute(key, compute)

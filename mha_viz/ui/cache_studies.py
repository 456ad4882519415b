"""The dashboard's caches over the studies: the head-count sweep, the Lesson's claims, role scores, ablation,
circuits and head importance. Each reads the recording and traces through ui.cache (plain values in, what the
study returns out; nothing drawn), in caches that hold their caps in entries and bytes (ui/memo.py)."""

from __future__ import annotations

import numpy as np
import torch

from mha_viz.config import MAX_SWEEP_HEADS, Config
from mha_viz.edits import divisors
from mha_viz.pipeline import own_road
from mha_viz.pipeline import road as pipeline
from mha_viz.studies import circuit_report, circuits, claims, importance
from mha_viz.studies import sweeps as studies
from mha_viz.trace import AttentionWeights
from mha_viz.ui.cache import get_all_patterns, get_trace, model_of, recording_of, tokens_of, whole_layer
from mha_viz.ui.memo import CACHES, SizedCache, sized_cache


def sweep_counts(width: int) -> list[int]:
    return [h for h in divisors(width) if h <= MAX_SWEEP_HEADS]


def _plain_layer(config: Config, text: str, target: str | None, part: str | None, layer: int):
    """(weights, X) of a plain-linear layer (own weights: the whole layer)."""
    if config.own:
        w = own_road.own_weights(config)
        return w, own_road.own_input(model_of(config), text, config, w.d_model)[1]
    lm = model_of(config)
    rec = whole_layer(config, text, target, part, layer)
    part = lm.part(part)
    return pipeline.layer_weights(lm, rec, part, layer), pipeline.layer_input(rec, part, layer)


@sized_cache(max_entries=16, max_mb=16)
def get_sweep(config: Config, text: str, target: str | None, part: str | None, layer: int) -> dict[str, list[float]]:
    weights, x = _plain_layer(config, text, target, part, layer)
    counts = sweep_counts(weights.n_heads * weights.d_head)
    return studies.headcount_sweep(weights, x, counts, Config(causal=config.causal, scaled=config.scaled,
                                                              device=config.device))  # fmt: skip


@sized_cache(max_entries=16, max_mb=64)
def get_identity_pair(
    config: Config, text: str, target: str | None, part: str | None, layer: int
) -> claims.Equivalence:
    """Claim (b) on a plain layer: h = 1 with W^O = I against plain self-attention, with the sidebar's scaling
    and the layer's mask."""
    weights, x = _plain_layer(config, text, target, part, layer)
    allowed = torch.isfinite(get_trace(config, text, target, part, layer).scores[0])  # [n, n]
    return claims.identity_equivalence(weights, x, scaled=config.scaled, allowed=None if allowed.all() else allowed)


@sized_cache(max_entries=16, max_mb=64)
def get_loop_vs_batched(
    config: Config, text: str, target: str | None, part: str | None, layer: int, plain: bool
) -> claims.Equivalence:
    """Claim (a) on this layer as traced: a loop over heads against one big matrix (from X on plain layers)."""
    trace = get_trace(config, text, target, part, layer)
    weights, x = _plain_layer(config, text, target, part, layer) if plain else (None, None)
    return claims.loop_vs_batched(trace, weights, x)


@sized_cache(max_entries=16, max_mb=16)
def get_plain_weights(config: Config, text: str, target: str | None, part: str | None, layer: int) -> AttentionWeights:
    """A plain layer's projections (the Lesson names their biases)."""
    return _plain_layer(config, text, target, part, layer)[0]


@sized_cache(max_entries=16, max_mb=16)
def get_roles(config: Config, text: str, target: str | None, part: str | None) -> list[dict]:
    """Role scores and labels for every layer × head (see roles.head_roles)."""
    tokens = (
        tokens_of(config, text)
        if config.own
        else recording_of(config, text, target).query_tokens(model_of(config).part(part))
    )
    return studies.roles_table(tokens, get_all_patterns(config, text, target, part))


@sized_cache(max_entries=16, max_mb=32)
def get_ablation(config: Config, text: str, target: str | None, plan: tuple) -> dict:
    """The whole model's output with heads zeroed: plan = (((part, layer), (heads...)), ...)."""
    return studies.ablation_effect(model_of(config), text, {key: list(hs) for key, hs in plan}, target)


@sized_cache(max_entries=8, max_mb=64)
def get_head_weights(config: Config, part: str, layer: int) -> circuit_report.HeadWeights:
    """The layer's W_Q, W_K, W_V, W_O per head (own weights: their one layer, as made or loaded)."""
    if config.own:
        return circuit_report.own_layer_weights(own_road.own_weights(config))
    return circuit_report.layer_weights(model_of(config), part, layer)


@sized_cache(max_entries=8, max_mb=1)
def get_copying_map(config: Config, part: str) -> np.ndarray:
    """Every head's OV copying score. Shapes: [n_layers, n_heads] (own weights: one layer)."""
    if config.own:
        return circuits.layer_copying_scores(get_head_weights(config, part, 0))[None]
    return circuit_report.copying_map(model_of(config), part)


@sized_cache(max_entries=32, max_mb=4)
def get_token_pairs(config: Config, text: str, target: str | None, part: str, layer: int, head: int) -> dict:
    if config.own:  # no vocabulary of their own: the text's tokens, as the rows of X they are given
        w = get_head_weights(config, part, layer)
        tokens, x = own_road.own_input(model_of(config), text, config, int(w.W_O.shape[-1]))
        return circuit_report.text_pairs(w, head, x, tokens.ids, tokens.pieces)
    lm = model_of(config)
    ids = recording_of(config, text, target).query_tokens(lm.part(part)).ids
    return circuit_report.token_pairs(lm, get_head_weights(config, part, layer), head, ids)


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

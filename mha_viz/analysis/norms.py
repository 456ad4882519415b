"""Norm-based attention (Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing Transformers
with Vector Norms", EMNLP).

A weight α_ij says how much query i looks at key j; what j actually sends to i through head h is the
vector α_ij · v_j W_O^h (v_j as the model used it, value bias included), after W^O. Its norm

    c_ij^h = ‖α_ij · v_j W_O^h‖ = α_ij · ‖v_j W_O^h‖

is the "contribution". A head that puts 0.9 of its weight on [SEP] whose transformed value vector is
short moves almost nothing there. For display each row is divided by its sum (the share of the row's
total contribution), so weights and contributions share the 0…1 scale; the raw norms are exported too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mha_viz.trace import AttentionTrace, MhaVizError

MEASURES = ("weight", "contribution")


def value_norms(trace: AttentionTrace) -> np.ndarray:
    """‖v_j W_O^h‖ for every head and key. Shapes: returns [h, n_k] float64."""
    v = trace.v.double()  # [kv, n_k, dh]
    w_o = trace.W_O.double()  # [h, dh, d]
    h = w_o.shape[0]
    per_head = v[torch.arange(h) // trace.group]  # [h, n_k, dh]: the K/V head each query head reads
    return (per_head @ w_o).norm(dim=-1).numpy()  # [h, n_k, d] -> [h, n_k]


def contributions(trace: AttentionTrace) -> np.ndarray:
    """c_ij^h = α_ij ‖v_j W_O^h‖ (raw norms). Shapes: returns [h, n_q, n_k] float64."""
    if trace.routing is not None:
        raise MhaVizError(
            "This layer's W^O is chosen per token (a mixture of attention heads), so what key j sends through a head "
            "is not α_ij · v_j W_O^h with one W_O^h: turn the contribution switch off for the weights."
        )
    if trace.wo_input is not None:
        raise MhaVizError(
            "This layer gates or normalises the heads before W^O (per query), so what key j sends through a head "
            "is not α_ij · v_j W_O^h: turn the contribution switch off for the weights."
        )
    return trace.pattern.double().numpy() * value_norms(trace)[:, None, :]


def row_shares(values: np.ndarray) -> np.ndarray:
    """Each row divided by its sum (rows that sum to 0 stay 0). Shapes: [..., n_k] -> same, float32."""
    total = values.sum(axis=-1, keepdims=True)
    out = np.divide(values, total, out=np.zeros_like(values, dtype=np.float64), where=total > 0)
    return out.astype(np.float32)


def shown_pattern(trace: AttentionTrace, measure: str) -> np.ndarray:
    """What a view draws for ``measure``: the weights α, or the row-normalised contributions.
    Shapes: returns [h, n_q, n_k] float32."""
    if measure == "weight":
        return trace.pattern.numpy().astype(np.float32)
    if measure != "contribution":
        raise ValueError(f"unknown measure {measure!r}; choose one of {', '.join(MEASURES)}")
    return row_shares(contributions(trace))


def sink_shares(pattern: np.ndarray, contribution: np.ndarray, sink: Sequence[bool]) -> dict[str, np.ndarray]:
    """Per head, the mean over query rows of the share that goes to the sink keys ([CLS]/[SEP], or a
    decoder's first token), by weight and by contribution. Shapes: pattern, contribution [h, n_q, n_k]
    (contribution raw or row-normalised); sink [n_k]; returns {"weight": [h], "contribution": [h]}."""
    mask = np.asarray(sink, dtype=bool)
    shares = row_shares(np.asarray(contribution, dtype=np.float64))
    return {
        "weight": np.asarray(pattern, dtype=np.float64)[..., mask].sum(-1).mean(-1),
        "contribution": shares[..., mask].sum(-1).mean(-1).astype(np.float64),
    }

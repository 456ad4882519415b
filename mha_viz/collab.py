"""Collaborative heads: how much of the query and key projections the heads share (Cordonnier et al. 2020,
"Multi-Head Attention: Collaborate Instead of Concatenate").

Per layer, the heads' query projections side by side, W_Q = [W_Q^1 … W_Q^h] ([d_model, h · d_head]), and the key
projections likewise ([d_model, kv · d_head]): their singular values, and how many dimensions keep 90 / 95 / 99 %
of the energy (the sum of squared singular values). Heads that learned independent projections need all h · d_head
dimensions; the article found that trained heads need about a third of them (they share their projections' space),
and proposed one shared projection with per-head mixing. One head alone is given for comparison (its d_head
dimensions, the mean over heads). Rotary models: the projections before the rotation. Weights only: no text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha_viz.models.load import LoadedModel
from mha_viz.models.projections import head_weights
from mha_viz.trace import MhaVizError

SHARES = (0.90, 0.95, 0.99)


def energy_dims(values: np.ndarray, shares: tuple[float, ...] = SHARES) -> tuple[int, ...]:
    """The fewest leading singular values that keep each share of the energy Σ σ². Shapes: values [r], descending."""
    energy = np.cumsum(np.asarray(values, dtype=np.float64) ** 2)
    if energy[-1] <= 0:
        return tuple(0 for _ in shares)
    return tuple(int(np.searchsorted(energy / energy[-1], s - 1e-12) + 1) for s in shares)


def energy_curve(values: np.ndarray) -> np.ndarray:
    """The share of the energy kept by the first 1, 2, … singular values. Shapes: [r] -> [r]."""
    energy = np.cumsum(np.asarray(values, dtype=np.float64) ** 2)
    return energy / energy[-1] if energy[-1] > 0 else energy


def _singular(w: torch.Tensor) -> np.ndarray:
    """Singular values of [d_model, width] (float64). Shapes: returns [min(d_model, width)]."""
    return torch.linalg.svdvals(w.double()).numpy()


@dataclass(frozen=True, eq=False)
class LayerSpectrum:
    """One layer. Shapes: q [min(d, h · d_head)], k [min(d, kv · d_head)] singular values, descending."""

    layer: int
    q: np.ndarray
    k: np.ndarray
    width_q: int  # h · d_head: the dimensions the concatenated queries have
    width_k: int  # kv · d_head
    dims_q: tuple[int, ...]  # dimensions keeping SHARES of the concatenated queries' energy
    dims_k: tuple[int, ...]
    one_head: tuple[float, ...]  # the same for one head's W_Q (mean over heads), out of d_head
    head_q: np.ndarray  # [h, d_head]: each head's own W_Q singular values


def spectra(lm: LoadedModel, part: str | None = None) -> list[LayerSpectrum]:
    """Every layer's spectra of the concatenated query and key projections."""
    p = lm.part(part)
    out = []
    for layer in range(lm.n_layers(p)):
        w = head_weights(lm, p, layer)
        if w.W_Q is None or w.W_K is None:
            raise MhaVizError(f"layer {layer} has no fixed query and key matrices: {w.qk_note}")
        wq = w.W_Q.permute(1, 0, 2).flatten(1)  # [h, d, dh] -> [d, h * dh]
        wk = w.W_K.permute(1, 0, 2).flatten(1)  # [kv, d, dh] -> [d, kv * dh]
        q, k = _singular(wq), _singular(wk)
        heads = np.stack([_singular(head) for head in w.W_Q])  # [h, d_head]
        one = np.mean([energy_dims(sv) for sv in heads], axis=0)  # [len(SHARES)]
        out.append(LayerSpectrum(layer, q, k, wq.shape[1], wk.shape[1], energy_dims(q), energy_dims(k),
                                 tuple(float(x) for x in one), heads))  # fmt: skip
    return out

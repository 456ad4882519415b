"""Collaborative heads: how much of the query and key projections the heads share (Cordonnier et al. 2020,
"Multi-Head Attention: Collaborate Instead of Concatenate").

Per layer, the heads' query projections side by side, W_Q = [W_Q^1 … W_Q^h] ([d_model, h · d_head]), and the key
projections likewise ([d_model, kv · d_head]): their singular values, and how many dimensions keep 90 / 95 / 99 %
of the energy (the sum of squared singular values). Heads that learned independent projections need all h · d_head
dimensions; the article found that trained heads need about a third of them (they share their projections' space),
and proposed one shared projection with per-head mixing. One head alone is given for comparison (its d_head
dimensions, the mean over heads). Rotary models: the projections before the rotation. Weights only: no text.

What-if (plain, non-rotary layers): every head's queries and keys projected onto a shared rank-r basis, the top-r
right singular vectors V_r of the concatenation: q ← (q − b_Q) V_r V_rᵀ + b_Q (the same as W_Q ← W_Q V_r V_rᵀ), keys
likewise with W_K's; one layer at a time (put in by Replace interventions through pipeline.run, values from the
unchanged pass: the layers before are unchanged, so they are the values of that pass); the output change against r
(Head importance's measure).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline.door import Replace
from mha_viz.pipeline.layer import layer_at
from mha_viz.pipeline.weights import head_weights, plain_weights
from mha_viz.studies.importance import Scorer
from mha_viz.studies.variants import head_change, layer_patterns
from mha_viz.trace import MhaVizError

SHARES = (0.90, 0.95, 0.99)
FRACTIONS = (1 / 8, 1 / 4, 1 / 3, 1 / 2, 2 / 3, 1.0)  # the what-if's r, as shares of the concatenation's width


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


def _basis(w: torch.Tensor, r: int) -> torch.Tensor:
    """The top-r right singular vectors of ``w``. Shapes: w [d, width] -> [width, r] float64."""
    _, _, vh = torch.linalg.svd(w.double(), full_matrices=False)  # vh [min(d, width), width]
    return vh[:r].T


def _projected(t: torch.Tensor, bias: torch.Tensor | None, v: torch.Tensor) -> torch.Tensor:
    """Heads' queries (or keys) with their concatenation projected onto span(v), the bias kept.
    Shapes: t [b, heads, pos, d_head]; bias [heads, d_head] or None; v [heads * d_head, r] -> like t."""
    b, h, n, dh = t.shape
    flat = t.double().transpose(1, 2).reshape(b, n, h * dh)  # [b, pos, h * dh]
    shift = 0.0 if bias is None else bias.double().reshape(h * dh)
    out = (flat - shift) @ v @ v.T + shift  # [b, pos, h * dh]
    return out.reshape(b, n, h, dh).transpose(1, 2).to(t.dtype)  # [b, heads, pos, d_head]


def rank_plan(lm: LoadedModel, scorer: Scorer, layer: int, fraction: float) -> tuple[Replace, Replace]:
    """The interventions for one text of ``scorer`` (pipeline.run): ``layer``'s queries and keys put on the shared
    rank-r bases (r = fraction of each concatenation's width, at least 1)."""
    site = layer_at(lm, None, scorer.part, layer).site  # the layer resolved once (an unknown one is refused)
    if not site.qkv:
        raise MhaVizError(
            "the shared-basis what-if needs plain query and key projections; this layer rotates or normalises them"
        )
    if len(scorer.texts) != 1:
        raise MhaVizError("the shared-basis what-if is measured on one text")
    w = plain_weights(lm.model, site, lm.n_heads, lm.n_kv_heads, 1.0)
    wq = w.W_Q.permute(1, 0, 2).flatten(1)  # [d, h * dh]
    wk = w.W_K.permute(1, 0, 2).flatten(1)  # [d, kv * dh]
    t = scorer.texts[0]
    run = pipeline.run(lm, t.ids, decoder_ids=t.dec, extras=False, only=(scorer.part, layer))
    call = run.calls[(scorer.part, layer)]
    yes = torch.ones((), dtype=torch.bool)
    q = _projected(call.q, w.b_Q, _basis(wq, max(1, round(fraction * wq.shape[1]))))  # [1, h, pos, dh]
    k = _projected(call.k, w.b_K, _basis(wk, max(1, round(fraction * wk.shape[1]))))  # [1, kv, pos, dh]
    return Replace(scorer.part, layer, "q", q, yes), Replace(scorer.part, layer, "k", k, yes)


@dataclass(frozen=True, eq=False)
class RankCurve:
    """The what-if for one layer. Shapes: change, distance [len(fractions)]; patterns [len(fractions), h, q, k]."""

    fractions: tuple[float, ...]
    ranks_q: tuple[int, ...]
    change: np.ndarray
    distance: np.ndarray  # mean over heads of the mean Jensen-Shannon distance over query rows
    patterns: np.ndarray


def rank_curve(
    lm: LoadedModel, text: str, target: str | None, part: str, layer: int, fractions: tuple[float, ...] = FRACTIONS
) -> RankCurve:
    """The whole-model output change and ``layer``'s patterns with its queries and keys on shared rank-r bases."""
    scorer = Scorer(lm, [text], part, target)
    before = layer_patterns(lm, text, target, scorer.part, layer)  # [h, q, k]
    changes, dists, pats, ranks = [], [], [], []
    for f in fractions:
        plan = rank_plan(lm, scorer, layer, f)
        changes.append(scorer.change(*plan, what=f"with queries and keys on {f:.0%} of their dimensions"))
        after = layer_patterns(lm, text, target, scorer.part, layer, *plan)
        dists.append(float(head_change(before, after).mean()))
        pats.append(after)
        _, h, _, dh = plan[0].values.shape
        ranks.append(max(1, round(f * h * dh)))
    return RankCurve(tuple(fractions), tuple(ranks), np.asarray(changes), np.asarray(dists), np.stack(pats))

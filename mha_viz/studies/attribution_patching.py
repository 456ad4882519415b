"""Attribution patching (Nanda 2023; Syed et al. 2023, "Attribution Patching Outperforms Automated Circuit
Discovery"): every head's patching effect estimated to first order from one forward and one backward pass.

    patched(l, h) − corrupted ≈ Σ_{pos, d_head} (a_clean − a_corrupted)[l, pos, h] · ∂metric/∂a [l, pos, h]

with a a head's output (its slice of W^O's input) or its q, k or v (k, v per K/V head), the gradient taken on the
corrupted run. A zero leaf tensor is added to every layer's activation through a Replace intervention (the pass is the
corrupted run itself; pipeline.gradients), so its gradient is what the model sends back to that activation along
every path; torch.autograd.grad asks for nothing else (no parameter gains a .grad: the shared model is untouched).
Exact where the metric is linear in the activation; a screen for real patching elsewhere.
"""

from __future__ import annotations

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.pipeline import Replace
from mha_viz.studies.patching import WHATS, Pair, record_sources
from mha_viz.trace import MhaVizError


def attribution(pair: Pair, what: str = "out") -> np.ndarray:
    """Every head's estimated patched metric (corrupted + the first-order change).
    Shapes: returns [n_layers, heads_of(what)], as patching.patch_heads."""
    if what not in WHATS:
        raise MhaVizError(f"patch one of {', '.join(WHATS)}, not {what!r}")
    lm, part, L = pair.lm, pair.part, pair.n_layers
    _, corrupted = record_sources(lm, part, pair.corrupt_ids)
    dev = lm.device
    dtype = next(lm.model.parameters()).dtype
    leaves = [torch.zeros_like(corrupted[(la, what)], device=dev, dtype=dtype, requires_grad=True) for la in range(L)]
    measure = lambda logits, hidden: pair.metric.value(logits, hidden)[0]
    steps = [Replace(part, la, what, leaves[la]) for la in range(L)]
    grads = pipeline.gradients(lm, pair.corrupt_ids, measure, leaves, *steps)
    change = np.zeros((L, leaves[0].shape[2 if what == "out" else 1]))
    for la, g in enumerate(grads):
        delta = pair.sources[(la, what)].double() - corrupted[(la, what)].double()  # clean − corrupted
        prod = delta * g.detach().double().cpu()  # [1, pos, h, dh] or [1, h, pos, dh]
        change[la] = (prod.sum(dim=(0, 1, 3)) if what == "out" else prod.sum(dim=(0, 2, 3))).numpy()
    return pair.corrupted + change

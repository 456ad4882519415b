"""Path patching (Wang et al. 2022, "Interpretability in the Wild", §3.1 and appendix B): how much of a sender
head's effect reaches the output through one input (q, k or v) of one later head, the receiver.

On the corrupted text, in three passes:
1. the corrupted run, its head outputs recorded (pair.sources holds the clean run's);
2. the sender's output set to its clean value while every head of the later layers is frozen at its corrupted
   output, so the sender's change reaches the later layers' inputs only directly through the residual stream
   (and the MLPs, which are recomputed, as in the paper); every later head's q, k and v recorded;
3. per receiver: the corrupted run with only that receiver's q (k, v: per K/V head) set to its value in pass 2,
   everything else computed as it comes; the metric measured (several receivers per forward pass).
recovered = (patched − corrupted) / (clean − corrupted), as for activation patching.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.pipeline.door import Replace
from mha_viz.studies.patching import Pair, Progress, heads_of, record_sources, run_batched
from mha_viz.trace import MhaVizError


def path_patch(pair: Pair, sender: tuple[int, int], what: str = "q", progress: Progress | None = None) -> np.ndarray:
    """The metric with the sender head's clean output reaching each later head only through its ``what`` input.
    Shapes: returns [n_layers, heads_of(what)], NaN in the sender's layer and the layers before it."""
    if what not in ("q", "k", "v"):
        raise MhaVizError(f"a receiver reads the sender through its q, k or v, not {what!r}")
    lm, part, L = pair.lm, pair.part, pair.n_layers
    ls, hs = sender
    if not (0 <= ls < L and 0 <= hs < lm.n_heads):
        raise MhaVizError(f"layer {ls}, head {hs} is not a head of {lm.name}")
    if ls == L - 1:
        raise MhaVizError("the sender is in the last layer: no later head can receive it; choose an earlier one")
    _, corrupted = record_sources(lm, part, pair.corrupt_ids)  # pass 1
    sender_where = torch.zeros(1, 1, lm.n_heads, 1, dtype=torch.bool)  # [1, 1, h, 1]: the sender, every position
    sender_where[0, 0, hs] = True
    frozen = torch.ones(1, 1, 1, 1, dtype=torch.bool)  # every head, every position
    steps = [Replace(part, ls, "out", pair.sources[(ls, "out")], sender_where)]
    steps += [Replace(part, la, "out", corrupted[(la, "out")], frozen) for la in range(ls + 1, L)]
    calls = pipeline.run(lm, pair.corrupt_ids, *steps).calls  # pass 2: what the later heads received
    received = {(la, what): getattr(calls[(part, la)], what) for la in range(ls + 1, L)}  # [1, h|kv, pos, dh]
    G = heads_of(lm, what)
    runs = [[(la, g, None)] for la in range(ls + 1, L) for g in range(G)]
    say = lambda i: f"Path patching L{ls}H{hs} → {what} of later heads: {i} of {len(runs)} receivers"
    patched = run_batched(dataclasses.replace(pair, sources=received), what, runs, progress, say)  # pass 3
    out = np.full((L, G), np.nan)
    out[ls + 1 :] = patched.reshape(L - ls - 1, G)
    return out

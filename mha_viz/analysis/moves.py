"""Two sentences, measured as its title claims: where the focus token's weight went between the two sentences (a share
per destination: referent 1, referent 2, the sinks, the rest), how much of it really moved from referent 1 to
referent 2, and whether any head switches. Pure numpy on the focus rows (no model, no Streamlit).

In "The animal didn't cross the street because it was too tired / wide" MiniLM's layer 3, head 1 has the largest
difference (w₂(street) − w₁(street)) − (w₂(animal) − w₁(animal)) = +0.45, but "street" gains only 0.05 → 0.13 while
[CLS] takes 0.12 → 0.36: most of what "animal" lost went to a sink, not to "street".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mha_viz.analysis.referents import shared_weights

DESTINATIONS = ("referent 1", "referent 2", "sinks", "the rest")


def destinations(
    row_a: np.ndarray, row_b: np.ndarray, pairs: Sequence[tuple[int, int]], slots: tuple[int, int], sinks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each sentence's focus row over the shared keys (rescaled to sum to 1, as referents.referent_shift), summed
    per destination: referent 1 (shared slot ``slots[0]``), referent 2 (``slots[1]``), the sinks (``sinks``: a bool
    per shared slot, e.g. special tokens and position 0; the referents are never sinks) and the rest.

    Shapes: row_a [..., n_a], row_b [..., n_b]; sinks [m] (m = len(pairs)) -> two [..., 4] (a, b), each summing to 1
    where the row had weight on the shared keys (else 0)."""
    ia = np.asarray([i for i, _ in pairs], dtype=int)
    ib = np.asarray([j for _, j in pairs], dtype=int)
    sink = np.asarray(sinks, dtype=bool).copy()
    sink[list(slots)] = False
    rest = ~sink
    rest[list(slots)] = False
    out = []
    for row, idx in ((row_a, ia), (row_b, ib)):
        w, _ = shared_weights(row, idx)  # [..., m]
        parts = [w[..., slots[0]], w[..., slots[1]], w[..., sink].sum(-1), w[..., rest].sum(-1)]
        out.append(np.stack(parts, -1))
    return out[0], out[1]


def switched_weight(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The weight that moved from referent 1 to referent 2: what referent 2 gained, at most what referent 1 lost
    (min of the two); negative the other way (referent 2 lost and referent 1 gained); 0 when both gained or both
    lost. This is what "moves from referent 1 to referent 2" claims, unlike the difference of the two changes, which
    a head that hands referent 1's weight to a sink also makes large. Shapes: a, b [..., 4] (destinations) -> [...]."""
    gain2, loss1 = b[..., 1] - a[..., 1], a[..., 0] - b[..., 0]
    both_ways = np.sign(gain2) == np.sign(loss1)
    return np.where(both_ways, np.sign(gain2) * np.minimum(np.abs(gain2), np.abs(loss1)), 0.0)


def switches(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether a head really switches the focus token from referent 1 to referent 2: in the first sentence it gives
    referent 1 more than referent 2, in the second referent 2 gets more than referent 1 and more than any other
    destination (the sinks together, the rest together). Shapes: a, b [..., 4] -> [...] bool."""
    first = a[..., 0] > a[..., 1]
    second = (b[..., 1] > b[..., 0]) & (b[..., 1] > b[..., 2]) & (b[..., 1] > b[..., 3])
    return first & second


def rank_switch(values: np.ndarray, top: int = 5) -> list[tuple[int, int, float]]:
    """The ``top`` heads by switched weight towards referent 2, largest first (ties: lowest layer, then head);
    heads that moved nothing towards it come last. Shapes: values [L, H]."""
    v = np.asarray(values, dtype=np.float64)
    order = np.argsort(-v, axis=None, kind="stable")[:top]
    H = v.shape[1]
    return [(int(i // H), int(i % H), float(v.flat[i])) for i in order]

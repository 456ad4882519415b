"""Step by step's choices as data: the notes above one head's matrices and the arrays its download holds. The view
(ui/views/step_by_step.py) draws the matrices (analysis.steps.head_steps). Pure (reads an AttentionTrace)."""

from __future__ import annotations

import numpy as np

from mha_viz.analysis.steps import latent_cache
from mha_viz.trace import AttentionTrace


def step_notes(t: AttentionTrace, i: int, where: str, plain: bool) -> list[str]:
    """The captions above head ``i``'s matrices: its sizes and the seven steps, why Q, K, V are shown as used (a
    layer that changes them after their projections), and what a latent-attention layer caches."""
    _, n, dk = t.q.shape
    d = t.output.shape[1]
    tokens = f"{n} token" + ("" if n == 1 else "s")
    notes = [
        f"{where.capitalize()}, head {i}: n = {tokens}, d_model = {d}, d_k = {dk}. The numbers follow the seven steps: "
        "1 X, 2 Q, K, V, 3 QKᵀ, 4 scaling, 5 mask, 6 softmax, 7 weights · V, concat, · W^O. Toggle the scaling and "
        "the causal mask in the sidebar. The seed 000 worked example is one click away there."
    ]
    if not plain:
        shared = " K and V are shared by a group of query heads (grouped-query attention)." if t.group > 1 else ""
        notes.append(
            "This layer changes queries and keys after their projections (rotary position embeddings, QK-norm) or "
            f"takes keys from another text, so Q, K and V are shown as the attention used them, recorded from the "
            f"model.{shared}"
        )
    if t.latent is not None:
        notes.append(
            latent_cache(t) + " Step 2 shows the latent c_KV and the rotary key part k_rope (what is cached), then "
            "the keys and values this head's group reads from them, as the model computed them."
        )
    return notes


def step_arrays(t: AttentionTrace, i: int) -> dict[str, np.ndarray]:
    """What Step by step's download holds for head ``i``: the tokens, X, this head's Q (and its K/V head's K, V),
    Q Kᵀ before scaling, the scores, weights and output, the concat and the layer's output (and a latent layer's
    cache). Shapes: as the trace's, one head's slice."""
    g = i // t.group  # the key/value head this query head uses (differs only with grouped-query attention)
    return {
        "tokens": np.asarray(list(t.tokens), dtype=str),
        "key_tokens": np.asarray(list(t.key_tokens), dtype=str),
        "x": t.x.numpy(),
        "q": t.q[i].numpy(),
        "k": t.k[g].numpy(),
        "v": t.v[g].numpy(),
        "kv_head": np.asarray(g),
        "qk": (t.q[i] @ t.k[g].T).numpy(),  # [n, nk] before scaling
        "scores": t.scores[i].numpy(),
        "pattern": t.pattern[i].numpy(),
        "z": t.z[i].numpy(),
        "concat": t.concat.numpy(),
        "output": t.output.numpy(),
        **({} if t.latent is None else {"c_kv": t.latent.c_kv.numpy(), "k_rope": t.latent.k_rope.numpy()}),
    }

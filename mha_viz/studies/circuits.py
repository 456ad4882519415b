"""QK and OV circuits of a head (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits").

With row vectors (x W), head h scores a query x_i against a key x_j by x_i W_Q^h (x_j W_K^h)ᵀ, so its QK
circuit is the d_model × d_model matrix W_Q^h W_K^hᵀ ("where to look"); what it moves from a key to the
query is x_j W_V^h W_O^h, its OV circuit W_V^h W_O^h ("what is moved"). Both have rank ≤ d_head, so
everything here goes through the small factors and never builds a d_model × d_model product:

- singular values: with reduced QR factorisations A = Q_A R_A and B = Q_B R_B, A Bᵀ = Q_A (R_A R_Bᵀ) Q_Bᵀ,
  and the singular values of A Bᵀ are those of the d_head × d_head matrix R_A R_Bᵀ;
- eigenvalues: the non-zero eigenvalues of W_V W_O are those of W_O W_V (d_head × d_head);
- copying score: Re(Σλ) / Σ|λ| over those eigenvalues: 1 for a head that copies what it attends to
  (an identity-like OV circuit), −1 for one that suppresses it, near 0 for neither.

Token pairs read the circuits through the vocabulary: source token s moves E_s W_V W_O, which the LM head
reads as logits (decoders) or which is compared with every token's embedding (encoders, "the embedding
alone"); query token a looks at key token b with score E_a W_Q (E_b W_K)ᵀ. Norms and position terms
between the embedding and the layer are left out, as in the paper: these are the weights' tendencies,
not what a given text computes (the attention views show that).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mha_viz.pipeline.weights import HeadWeights


def _r(a: torch.Tensor) -> torch.Tensor:
    """The R of a reduced QR factorisation. Shapes: a [d, k] -> [k, k] (float64)."""
    return torch.linalg.qr(a.double(), mode="r").R


def product_singular_values(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Singular values of a · bᵀ from the factors. Shapes: a, b [d, k] -> [k], descending."""
    return torch.linalg.svdvals(_r(a) @ _r(b).T).numpy()


def qk_singular_values(w: HeadWeights, head: int) -> np.ndarray | None:
    """Singular values of W_Q^h W_K^hᵀ [d_head], or None where the QK circuit is not a fixed matrix."""
    if w.W_Q is None or w.W_K is None:
        return None
    return product_singular_values(w.W_Q[head], w.W_K[head // w.group])


def ov_singular_values(w: HeadWeights, head: int) -> np.ndarray | None:
    """Singular values of W_V^h W_O^h [d_head], or None where V is not a fixed linear map."""
    if w.W_V is None:
        return None
    return product_singular_values(w.W_V[head // w.group], w.W_O[head].T)


def ov_eigenvalues(w_v: torch.Tensor, w_o: torch.Tensor) -> np.ndarray:
    """The non-zero eigenvalues of W_V W_O, as those of W_O W_V. Shapes: w_v [d, k], w_o [k, d] -> [k] complex."""
    return torch.linalg.eigvals(w_o.double() @ w_v.double()).numpy()


def copying_score(eigenvalues: np.ndarray) -> float:
    """Re(Σλ) / Σ|λ| (0 for an all-zero circuit)."""
    total = float(np.abs(eigenvalues).sum())
    return float(np.real(eigenvalues.sum()) / total) if total > 0 else 0.0


def head_copying_score(w: HeadWeights, head: int) -> float | None:
    if w.W_V is None:
        return None
    return copying_score(ov_eigenvalues(w.W_V[head // w.group], w.W_O[head]))


def layer_copying_scores(w: HeadWeights) -> np.ndarray:
    """Every head's copying score in a layer (NaN where V is not a fixed map). Shapes: [h]."""
    return np.asarray(
        [np.nan if (s := head_copying_score(w, i)) is None else s for i in range(w.W_O.shape[0])], dtype=np.float64
    )


def top_pairs(scores: torch.Tensor, rows: Sequence[int], k: int) -> list[tuple[int, int, float]]:
    """The k largest entries of ``scores`` [m, V] as (row id, column id, score), rows named by ``rows``."""
    k = min(k, scores.numel())
    values, flat = scores.flatten().topk(k)
    cols = scores.shape[1]
    return [(int(rows[int(f) // cols]), int(f) % cols, float(v)) for v, f in zip(values, flat, strict=True)]


def ov_token_scores(
    w: HeadWeights, head: int, embed: torch.Tensor, source_ids: Sequence[int], read: torch.Tensor
) -> torch.Tensor:
    """What each source token, once attended to, writes, read against every token direction.

    Shapes: embed [vocab, d]; read [vocab, d] (the LM head's rows, or the embeddings for encoders);
    returns [len(source_ids), vocab]: E_s W_V^h W_O^h · read_tᵀ."""
    if w.W_V is None:
        raise ValueError(w.ov_note or "no OV circuit")
    src = embed[torch.as_tensor(list(source_ids), dtype=torch.long)].double()  # [m, d]
    moved = (src @ w.W_V[head // w.group].double()) @ w.W_O[head].double()  # [m, d] through [d, dh], [dh, d]
    return moved @ read.double().T  # [m, vocab]


def qk_token_scores(
    w: HeadWeights, head: int, embed: torch.Tensor, query_ids: Sequence[int], key_ids: Sequence[int]
) -> torch.Tensor:
    """How much query token a looks at key token b through the QK circuit: E_a W_Q (E_b W_K)ᵀ.
    Shapes: returns [len(query_ids), len(key_ids)]."""
    if w.W_Q is None or w.W_K is None:
        raise ValueError(w.qk_note or "no QK circuit")
    qa = embed[torch.as_tensor(list(query_ids), dtype=torch.long)].double() @ w.W_Q[head].double()  # [m, dh]
    kb = embed[torch.as_tensor(list(key_ids), dtype=torch.long)].double() @ w.W_K[head // w.group].double()
    return qa @ kb.T

"""The heads that matter at length: numbers and rules (numpy in, numpy out; no model runs here).

- retrieval score (Wu et al. 2024, "Retrieval Head Mechanistically Explains Long-Context Factuality"): while the
  model generates, a head copies a needle token when the token just chosen is in the needle and the head's most
  attended key is that same token at its place in the needle; its score is the share of the needle's tokens it
  copied (averaged over the needle's depths).
- DuoAttention's two kinds: a head is *streaming* when attention sinks plus a recent window carry its weight (its
  A-shape recall >= STREAMING_RECALL) and it copies nothing from far away (retrieval < RETRIEVAL_MIN); else it is a
  *retrieval* head (its whole cache is needed).
- MInference's pattern kinds, each head the one with the highest recall (the share of the real weight the pattern's
  cells hold): A-shape (the first SINK_TOKENS keys and the last w), vertical-slash (the top 1/PATTERN_BUDGET key
  columns and the top 1/PATTERN_BUDGET diagonals, estimated on the last query rows as MInference does), block-sparse
  (each block-row's top 1/PATTERN_BUDGET tiles of the pooled exact map).
"""

from __future__ import annotations

import numpy as np

from mha_viz.config import LONG_PATTERN_BUDGET as PATTERN_BUDGET
from mha_viz.config import LONG_STREAMING_RECALL as STREAMING_RECALL
from mha_viz.config import MIN_RETRIEVAL_SCORE as RETRIEVAL_MIN

PATTERNS = ("A-shape", "vertical-slash", "block-sparse")


def retrieval_hits(top: np.ndarray, chosen: np.ndarray, prompt: np.ndarray, needle: slice) -> np.ndarray:
    """How many needle tokens each head copied in one generation. A token chosen at a step counts for a head when it
    is one of the needle's tokens, the head's most attended key at that step lies in the needle and holds that same
    token; each needle position counts once per head. Shapes: top [steps, L, H] key positions; chosen [steps] token
    ids; prompt [n] token ids; returns [L, H] counts."""
    top, prompt = np.asarray(top), np.asarray(prompt)
    hits = np.zeros(top.shape[1:], dtype=np.int64)
    seen: dict[tuple[int, int], set[int]] = {}
    wanted = set(prompt[needle].tolist())
    for step, token in enumerate(np.asarray(chosen).tolist()):
        if token not in wanted:
            continue
        for (layer, head), key in np.ndenumerate(top[step]):
            copied = needle.start <= key < needle.stop and int(prompt[key]) == token
            if copied and key not in seen.setdefault((layer, head), set()):
                seen[(layer, head)].add(int(key))
                hits[layer, head] += 1
    return hits


def retrieval_score(hits: list[np.ndarray], needle_lengths: list[int]) -> np.ndarray:
    """Each head's retrieval score: copied needle tokens over needle tokens, averaged over the generations (depths).
    Shapes: hits [L, H] each; returns [L, H] in 0…1."""
    return np.mean([h / max(1, n) for h, n in zip(hits, needle_lengths, strict=True)], axis=0)


def duo_kind(a_shape: np.ndarray, retrieval: np.ndarray) -> np.ndarray:
    """DuoAttention's kind of each head ("streaming" or "retrieval"), by the rule in the module docstring.
    Shapes: [L, H] each -> [L, H] str."""
    streaming = (np.asarray(a_shape) >= STREAMING_RECALL) & (np.asarray(retrieval) < RETRIEVAL_MIN)
    return np.where(streaming, "streaming", "retrieval")


def pattern_kind(recalls: np.ndarray) -> np.ndarray:
    """MInference's kind of each head: the pattern with the highest recall (ties: the first in PATTERNS).
    Shapes: recalls [L, H, 3] in PATTERNS' order -> [L, H] str."""
    return np.asarray(PATTERNS)[np.argmax(np.asarray(recalls), axis=-1)]


def vertical_slash_recall(rows: np.ndarray, first_row: int) -> np.ndarray:
    """The share of the weight of some query rows held by their top 1/PATTERN_BUDGET key columns and top
    1/PATTERN_BUDGET diagonals (query − key offsets), per head. Shapes: rows [h, r, n_k] exact weights of query rows
    first_row … first_row + r − 1; returns [h]."""
    h, r, n_k = rows.shape
    budget = max(1, -(-n_k // PATTERN_BUDGET))
    cols = rows.sum(1)  # [h, n_k]
    offset = (first_row + np.arange(r))[:, None] - np.arange(n_k)[None, :]  # [r, n_k]
    diag = np.zeros((h, n_k))
    ok = (offset >= 0) & (offset < n_k)
    for head in range(h):
        np.add.at(diag[head], offset[ok], rows[head][ok])
    keep_c = np.argsort(-cols, axis=-1)[:, :budget]  # [h, budget]
    keep_d = np.argsort(-diag, axis=-1)[:, :budget]
    out = np.zeros(h)
    for head in range(h):
        cell = np.isin(np.arange(n_k)[None, :], keep_c[head]) | (np.isin(offset, keep_d[head]) & ok)  # [r, n_k]
        out[head] = rows[head][cell].sum() / max(rows[head].sum(), 1e-30)
    return out


def block_sparse_recall(tiles: np.ndarray, f: int, n_q: int, n_k: int) -> np.ndarray:
    """The share of the weight held by each block-row's top 1/PATTERN_BUDGET tiles, per head, from the pooled exact
    map (tile means × the tile's cells = its weight). Shapes: tiles [h, m_q, m_k] f×f means; returns [h]."""
    rows = np.minimum(f, n_q - np.arange(0, n_q, f))
    cols = np.minimum(f, n_k - np.arange(0, n_k, f))
    mass = np.asarray(tiles, dtype=np.float64) * np.outer(rows, cols)  # [h, m_q, m_k]
    budget = max(1, -(-mass.shape[-1] // PATTERN_BUDGET))
    top = -np.sort(-mass, axis=-1)[..., :budget].sum((-1, -2))
    return top / np.maximum(mass.sum((-1, -2)), 1e-30)


def recall(generated: list[str], answer: str) -> float:
    """The share of generations that contain the needle's answer (case and surrounding spaces ignored)."""
    want = answer.strip().lower()
    return float(np.mean([want in text.lower() for text in generated])) if generated else 0.0

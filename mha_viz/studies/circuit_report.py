"""A head's circuits, read through the model's vocabulary: what the Circuits view and its downloads show."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mha_viz.config import MAX_OV_SOURCES
from mha_viz.models.load import LoadedModel
from mha_viz.models.tokens import readable
from mha_viz.pipeline.weights import HeadWeights, embedding_matrix, head_weights, unembedding_matrix
from mha_viz.studies import circuits
from mha_viz.trace import AttentionWeights


def layer_weights(lm: LoadedModel, part: str, layer: int) -> HeadWeights:
    return head_weights(lm, lm.part(part), layer)


def own_layer_weights(w: AttentionWeights) -> HeadWeights:
    """Own weights' one layer as a head_weights result: every projection a fixed matrix, no rotation."""
    return HeadWeights(W_Q=w.W_Q.float(), W_K=w.W_K.float(), W_V=w.W_V.float(), W_O=w.W_O.float(), rotary=False)


def text_pairs(w: HeadWeights, head: int, x: torch.Tensor, ids: Sequence[int], names: Sequence[str], k: int = 10,
               per_source: int = 3) -> dict[str, list]:  # fmt: skip
    """token_pairs for own weights, which have no vocabulary of their own: each distinct token of the text (by id,
    its first position; at most MAX_OV_SOURCES) is its row of X, and the OV circuit's output is read against the
    same rows (the text's own token vectors). Shapes: x [n, d_model]; ids, names [n]."""
    seen: dict[int, int] = {}
    for p, i in enumerate(ids):
        seen.setdefault(int(i), p)  # a token's first position
    pos = list(seen.values())[:MAX_OV_SOURCES]
    out: dict[str, list] = {"ov": [], "qk": [], "ov_reads": "the text's own token vectors (rows of X)"}
    if not pos:
        return out
    rows = x[torch.as_tensor(pos, dtype=torch.long)].float()  # [m, d]
    local = list(range(len(pos)))
    ov = circuits.ov_token_scores(w, head, rows, local, rows)  # [m, m]
    values, cols = ov.topk(min(per_source, len(pos)), dim=1)
    out["ov"] = [
        (names[p], [(names[pos[int(c)]], float(v)) for v, c in zip(values[i], cols[i], strict=True)])
        for i, p in enumerate(pos)
    ]
    pairs = circuits.top_pairs(circuits.qk_token_scores(w, head, rows, local, local), local, k)
    out["qk"] = [(names[pos[a]], names[pos[b]], v) for a, b, v in pairs]
    return out


def copying_map(lm: LoadedModel, part: str) -> np.ndarray:
    """Every head's OV copying score (NaN where V is not a fixed map). Shapes: [n_layers, n_heads]."""
    part = lm.part(part)
    return np.stack([circuits.layer_copying_scores(head_weights(lm, part, la)) for la in range(lm.n_layers(part))])


def _label(lm: LoadedModel, token_id: int) -> str:
    return readable(lm.tokenizer.decode([int(token_id)])).strip() or repr(lm.tokenizer.decode([int(token_id)]))


def token_pairs(
    lm: LoadedModel, w: HeadWeights, head: int, ids: Sequence[int], k: int = 10, per_source: int = 3
) -> dict[str, list]:
    """The token pairs each circuit favours most, with readable tokens.

    "ov": for each distinct token of the text (at most MAX_OV_SOURCES) as the attended source, its
    ``per_source`` best destinations over the vocabulary, read through the LM head for models with one
    and against the embeddings otherwise: (source, [(destination, score), ...]). "qk": the k best
    (query, key, score) pairs over the distinct tokens of the text. Special tokens are left out."""
    special = set(getattr(lm.tokenizer, "all_special_ids", []) or [])
    distinct = [i for i in dict.fromkeys(int(t) for t in ids) if i not in special][:MAX_OV_SOURCES]
    out: dict[str, list] = {"ov": [], "qk": [], "ov_reads": ""}
    if not distinct:
        return out
    embed = embedding_matrix(lm)
    if w.W_V is not None:
        unembed = unembedding_matrix(lm)
        read = embed if unembed is None else unembed
        out["ov_reads"] = "the embeddings" if unembed is None else "the LM head"
        scores = circuits.ov_token_scores(w, head, embed, distinct, read)  # [m, vocab]
        drop = sorted(i for i in special if i < scores.shape[1])
        scores[:, drop] = -np.inf  # never "moves [SEP]"
        values, cols = scores.topk(min(per_source, scores.shape[1]), dim=1)  # [m, per_source]
        out["ov"] = [
            (_label(lm, s), [(_label(lm, int(c)), float(v)) for v, c in zip(values[i], cols[i], strict=True)])
            for i, s in enumerate(distinct)
        ]
    if w.W_Q is not None:
        scores = circuits.qk_token_scores(w, head, embed, distinct, distinct)  # [m, m]
        pairs = circuits.top_pairs(scores, distinct, k)
        out["qk"] = [(_label(lm, a), _label(lm, distinct[b]), v) for a, b, v in pairs]
    return out

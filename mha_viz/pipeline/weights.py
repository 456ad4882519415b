"""What studies read of a model besides a run (issue 36 §1: studies reach models/ through pipeline/): its weights
per head (W_Q, W_K, W_V, W^O; a plain layer's as our AttentionWeights), its token embeddings and unembedding, and
the logit lens's final norm and LM head. Each returns new tensors: the shared model is never touched."""

from __future__ import annotations

from mha_viz.models.arch import plain_weights
from mha_viz.models.projections import HeadWeights, embedding_matrix, head_weights, unembedding_matrix
from mha_viz.models.run import output_projection, token_embeddings, word_embeddings
from mha_viz.models.unembed import (
    Unembedding,
    apply_norm,
    centre,
    head_module,
    head_rows,
    norm_scale,
    residual_stream,
    unembed,
    unembedding,
)

__all__ = ["HeadWeights", "embedding_matrix", "head_weights", "plain_weights", "unembedding_matrix"]  # per head
__all__ += ["output_projection", "token_embeddings", "word_embeddings"]  # W^O and the input embeddings
__all__ += ["Unembedding", "apply_norm", "centre", "head_module", "head_rows", "norm_scale", "residual_stream"]
__all__ += ["unembed", "unembedding"]  # the logit lens (models/unembed.py)

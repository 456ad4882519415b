"""The weights behind a head's circuits, in our layout: W_Q and W_K (before any rotation), W_V, W_O, and the
model's token embedding and unembedding matrices. Always new tensors: the shared model is never touched."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mha_viz.models import offload
from mha_viz.models.arch import plain_weights
from mha_viz.models.load import LoadedModel
from mha_viz.models.offload import linear_in_out


@dataclass(frozen=True, eq=False)
class HeadWeights:
    """One layer's projections. Shapes: W_Q [h, d, dh]; W_K, W_V [kv, d, dh]; W_O [h, dh, d] (float32, CPU).

    W_Q/W_K are None where the QK circuit is not a fixed matrix (``qk_note`` says why); W_V is None where
    V is not a plain linear map of the layer's input (``ov_note`` says why)."""

    W_Q: torch.Tensor | None
    W_K: torch.Tensor | None
    W_V: torch.Tensor | None
    W_O: torch.Tensor
    rotary: bool  # queries and keys are rotated after W_Q, W_K by their positions
    qk_note: str = ""
    ov_note: str = ""

    @property
    def group(self) -> int:
        """Query heads per K/V head (query head i uses K/V head i // group)."""
        kv = self.W_V.shape[0] if self.W_V is not None else self.W_K.shape[0] if self.W_K is not None else 0
        return self.W_O.shape[0] // kv if kv else 1


def _heads(w: torch.Tensor, count: int) -> torch.Tensor:  # [d, count*dh] -> [count, d, dh]
    d = w.shape[0]
    return w.reshape(d, count, -1).permute(1, 0, 2).float().contiguous()


def head_weights(lm: LoadedModel, part: str, layer: int) -> HeadWeights:
    """The layer's W_Q, W_K, W_V and W_O per head, as far as they are fixed matrices."""
    site = lm.site(part, layer)
    model = lm.model
    w_o, _ = linear_in_out(model.get_submodule(site.wo))  # [h*dh, d]
    h, kv = lm.n_heads, lm.n_kv_heads
    dh = w_o.shape[0] // h
    W_O = w_o.reshape(h, dh, -1).float()
    if site.qkv:
        w = plain_weights(model, site, h, kv, dh**-0.5)
        return HeadWeights(w.W_Q.float(), w.W_K.float(), w.W_V.float(), W_O, rotary=False)
    if site.part == "cross":
        why = "cross-attention reads its keys and values from the encoder's output, another stream"
        return HeadWeights(None, None, None, W_O, rotary=False, qk_note=why, ov_note=why)
    W_V = _heads(linear_in_out(model.get_submodule(site.v))[0], kv) if site.v else None
    ov_note = "" if site.v else "this layer's V is not a plain linear map of its input (fused or transformed)"
    if site.pre_rotary:
        (wq, _), (wk, _) = (linear_in_out(model.get_submodule(n)) for n in site.pre_rotary)
        return HeadWeights(_heads(wq, h), _heads(wk, kv), W_V, W_O, rotary=True, ov_note=ov_note)
    qk_note = (
        "this layer changes queries and keys after their projections in a way that is not a rotation "
        "(QK-norm) or fuses them, so no fixed matrix gives its scores"
    )
    return HeadWeights(None, None, W_V, W_O, rotary=False, qk_note=qk_note, ov_note=ov_note)


def embedding_matrix(lm: LoadedModel) -> torch.Tensor:
    """The token embeddings. Shapes: [vocab, d_model] (a float32 CPU copy)."""
    return offload.tensor(lm.model.get_input_embeddings()).detach().float().cpu().clone()


def unembedding_matrix(lm: LoadedModel) -> torch.Tensor | None:
    """The LM head's rows (token directions the logits read), or None for models without one.
    Shapes: [vocab, d_model]."""
    if not lm.causal_lm:
        return None
    head = lm.model.get_output_embeddings() if hasattr(lm.model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.shape[-1] != lm.d_model:
        return None
    return weight.detach().float().cpu().clone()

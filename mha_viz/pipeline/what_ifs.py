"""The what-if edits on a layer's weights: re-split heads, the W^O variant, head scaling and ablation (one
definition each, for the road's layer_trace, the long-text rows and own weights). New objects, never mutation."""

from __future__ import annotations

import torch

from mha_viz.config import Config
from mha_viz.edits import ablate_heads, apply_wo, edit_wo, regroup_heads, scale_heads
from mha_viz.models.arch import Site
from mha_viz.models.call import Call
from mha_viz.models.load import LoadedModel
from mha_viz.models.moa import routing_of
from mha_viz.models.offload import linear_in_out
from mha_viz.trace import AttentionWeights, MhaVizError, Routing


def wo_factors(config: Config) -> dict[int, float]:
    """Per-head factors on W^O: the sidebar's head scaling, and 0 for ablated heads."""
    factors = dict(config.head_scale)
    factors.update({int(i): 0.0 for i in config.ablate})
    return factors


def routed(
    lm: LoadedModel, site: Site, call: Call, config: Config
) -> tuple[Routing | None, torch.Tensor | None, torch.Tensor | None]:
    """A mixture of attention heads' routing, every expert's W^O as heads and the layer's bias, else (None, None,
    None). ``site``: the layer's, looked up once by the caller (lm.site). Shapes: returns W_O
    [n_experts * n_kv_heads, d_head, d], b_O [d]."""
    moa = site.moa
    if not moa:
        return None, None, None
    if config.wo != "learned" or wo_factors(config):
        raise MhaVizError(
            _PER_TOKEN + "; the W^O what-ifs and head factors need one W^O per layer, so they do not apply here. "
            "Step by step shows how each token's experts combine; try the what-ifs on another model"
        )
    routing, b_o = routing_of(lm.model, moa, call)
    return routing, routing.W_E.reshape(-1, *routing.W_E.shape[2:]), b_o


_PER_TOKEN = "this layer's W^O is chosen per token (a mixture of attention heads: each token's experts)"


def edited_wo(lm: LoadedModel, site: Site, call: Call, config: Config) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The layer's W^O per head after the W^O what-if and head factors (``site``: the layer's, looked up once by
    the caller). Shapes: returns [h, d_v, d], [d]."""
    if site.moa:
        raise MhaVizError(_PER_TOKEN + ", so no one W^O per head can be used here")
    w_in, b_o = linear_in_out(lm.model.get_submodule(site.wo))  # [h*dv, d], [d] (copies)
    h, dv = call.q.shape[1], call.v.shape[-1]  # W^O reads value heads (MLA: d_v ≠ d_qk)
    return edit_wo(w_in.reshape(h, dv, -1), b_o, config.wo, config.wo_seed, wo_factors(config))


def edit_weights(weights: AttentionWeights, config: Config) -> AttentionWeights:
    """Apply the what-if edits in order: re-split heads, the W^O variant, head scaling, ablation."""
    w = weights if config.heads is None else regroup_heads(weights, config.heads)
    w = apply_wo(w, config.wo, config.wo_seed)
    if config.head_scale:
        w = scale_heads(w, dict(config.head_scale))
    return ablate_heads(w, config.ablate) if config.ablate else w

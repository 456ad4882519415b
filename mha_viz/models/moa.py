"""A mixture of attention heads (MoA: JetMoE, https://arxiv.org/abs/2404.07413) as the model computes it.

Such a layer has no one W^O: a router picks, per token, k of its experts (top-k of X · W_router, gates softmax over
those k logits); each expert has its own query projection and its own output projection over the K/V heads every
expert shares. The attention call's head j·n_kv + g is the token's j-th chosen expert's head g, and what enters
the residual is Σ_j gate_j · (the j-th expert's W^O)(heads of slot j) + b. The probe finds the module by its parts
(a router with top_k and an output projection per expert that reads the call's heads of one slot); a hook on the
router records the routing the model used (never recomputed), and the trace's output is checked against the
attention module's own output (the W^O hook is on it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mha_viz.models.call import Call
from mha_viz.models.capture import active
from mha_viz.trace import Routing


def find_moa(name: str, call: Call, modules: dict[str, torch.nn.Module]) -> str:
    """The module inside attention module ``name`` that routes its heads (its router and its experts' output
    projections), else "". Shapes: call.q [b, k·n_kv, q_pos, d_head]; the experts' W^O [n_experts, d_model,
    n_kv·d_head]."""
    h, dh = int(call.q.shape[1]), int(call.q.shape[-1])
    for mod_name, mod in modules.items():
        router, out = getattr(mod, "router", None), getattr(mod, "output_linear", None)
        top_k, weight = getattr(router, "top_k", None), getattr(out, "weight", None)
        if not isinstance(top_k, int) or not isinstance(weight, torch.Tensor) or weight.ndim != 3:
            continue
        if top_k >= 1 and h % top_k == 0 and int(weight.shape[-1]) == h // top_k * dh:
            return mod_name
    return ""


def routing_hook(attn_module: torch.nn.Module, top_k: int) -> Callable:
    """A forward hook for the router, filed with the next call of ``attn_module``: which experts each token was
    sent to (best first) and their gates, read from the router's own output (index_sorted_experts, batch_index,
    batch_gates, expert_size, logits): its gates grouped by expert, and where each went in [tokens · k]."""

    def hook(_mod: torch.nn.Module, _args: tuple, output: tuple) -> None:
        rec = active()
        if rec is None or not rec.keep or not rec.wants(*rec.upcoming(attn_module)):
            return
        order, _, gates, sizes = output[:4]  # [n·k] long, [n·k], [n·k], [n_experts] ints
        sizes = torch.as_tensor(sizes, device=order.device)
        ids = torch.repeat_interleave(torch.arange(len(sizes), device=order.device), sizes)  # [n·k]: sorted by expert
        experts = torch.empty_like(order).scatter_(0, order, ids)  # [n·k] in token order, slot j at m·k + j
        flat = torch.empty_like(gates).scatter_(0, order, gates)  # [n·k]
        rec.pending_pre[(id(attn_module), "experts")] = experts.detach().cpu().view(-1, top_k)  # [b·n, k]
        rec.pending_pre[(id(attn_module), "gates")] = flat.detach().float().cpu().view(-1, top_k)  # [b·n, k]

    return hook


def routing_of(model: torch.nn.Module, moa: str, call: Call) -> tuple[Routing, torch.Tensor | None]:
    """Batch item 0's routing of a recorded call of a routed layer (``moa`` its routing module), and the layer's
    bias [d_model] or None. Shapes: see trace.Routing."""
    from mha_viz.models import offload

    if call.experts is None or call.gates is None:
        from mha_viz.trace import MhaVizError

        raise MhaVizError("this layer routes its heads per token, and its routing was not recorded")
    module = model.get_submodule(moa)
    b, h, n, dh = call.q.shape
    k = int(call.experts.shape[-1])
    w = offload.tensor(module.output_linear, "weight").detach().float().cpu()  # [E, d_model, n_kv·d_head]
    w_e = w.transpose(1, 2).reshape(w.shape[0], h // k, dh, w.shape[1])  # [E, n_kv, d_head, d_model]
    bias = offload.tensor(module, "bias")  # [d_model] or None
    routing = Routing(
        experts=call.experts.view(b, n, k)[0].clone(),  # [n, k]
        gates=call.gates.view(b, n, k)[0].clone(),  # [n, k]
        W_E=w_e.contiguous(),
    )
    return routing, None if bias is None else bias.detach().float().cpu().clone()

"""The forward hooks that file, with an attention call, what the attention function does not see: the module's input
X, the query and key projections before rotary embeddings, latent attention's c_KV and rotary key part, and what W^O
read and produced. Each files only while a Recorder is active in the calling context (models.capture)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from mha_viz.models.capture import StopForward, active, cpu32


def input_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    """Forward pre-hook on an attention module: its input X (and the key side of cross-attention)."""
    rec = active()
    if rec is None or not rec.extras or not rec.wants(*rec.upcoming(module)):
        return
    x = args[0] if args else kwargs.get("hidden_states")
    x_kv = kwargs.get("key_value_states")
    if x_kv is None:
        x_kv = kwargs.get("encoder_hidden_states")
    if isinstance(x, torch.Tensor):
        rec.pending[id(module)] = (cpu32(x), None if not isinstance(x_kv, torch.Tensor) else cpu32(x_kv))


def projection_hook(attn_module: torch.nn.Module, which: str) -> Callable:
    """A forward hook for a query or key projection whose output the model rotates afterwards: the output
    before rotary embeddings, filed with the next call of ``attn_module``."""

    def hook(_mod: torch.nn.Module, _args: tuple, output: torch.Tensor) -> None:
        rec = active()
        if rec is None or not rec.extras or not isinstance(output, torch.Tensor):
            return
        if rec.wants(*rec.upcoming(attn_module)):
            rec.pending_pre[(id(attn_module), which)] = cpu32(output)

    return hook


def latent_hook(attn_module: torch.nn.Module, which: str, d_rope: int = 0) -> Callable:
    """A forward hook for latent attention (MLA), filed with the next call of ``attn_module``: on the up-projection
    W_UKV (``which`` "c_kv") its input, the latent c_KV [b, pos, d_c]; on the down-projection ("k_rope") its last
    ``d_rope`` output columns, the rotary key part before rotation [b, pos, d_rope]."""

    def hook(_mod: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
        rec = active()
        if rec is None or not rec.extras or not rec.wants(*rec.upcoming(attn_module)):
            return
        t = args[0] if which == "c_kv" and args else output[..., -d_rope:] if d_rope else None
        if isinstance(t, torch.Tensor):
            rec.pending_pre[(id(attn_module), which)] = cpu32(t).reshape(t.shape[0], -1, t.shape[-1])

    return hook


def output_hook(attn_module: torch.nn.Module, reads_transformed: bool = False) -> Callable:
    """A forward hook for W^O: what it produced, filed with the last call of ``attn_module``; with
    ``reads_transformed`` (a gate or norm between the heads and W^O) also what it read, in every recording (the
    layer's output is computed from it)."""

    def hook(_mod: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
        rec = active()
        if rec is None or not rec.keep:
            return
        if reads_transformed and args and isinstance(args[0], torch.Tensor):
            read = rec.last.get(id(attn_module))
            if read is not None and read.wo_read is None:
                read.wo_read = cpu32(args[0])  # [b, q_pos, h*dh]
        if not rec.extras:
            return
        call = rec.last.get(id(attn_module))
        if isinstance(output, tuple) and output:  # W^O is the attention module itself (a mixture of attention heads)
            output = output[0]
        if call is not None and call.wo_out is None and isinstance(output, torch.Tensor):
            call.wo_out = cpu32(output)
            if rec.stop and (call.part, call.layer) == rec.only:
                raise StopForward

    return hook

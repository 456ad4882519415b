"""Latent attention (MLA: DeepSeek-V2/V3, MiniCPM3), found on the probe's numbers, never by a family name.

Such a layer caches, per token, a compressed key/value latent c_KV = norm(X · W_DKV) [d_c] and one rotary key
part k_rope = RoPE(X · W_KR) [d_rope] shared by every head; each head's keys (their part without rotary
embeddings) and values are c_KV times that head's slice of one up-projection W_UKV. The probe finds W_UKV as the
linear map inside the attention module whose output, split per head, is exactly the no-rope part of k and v
(its input is then c_KV), and the down-projection as the one whose last d_rope columns have, per token, the
lengths of the rotary key part (a rotation keeps lengths).
"""

from __future__ import annotations

import torch

from mha_viz.models.call import Call
from mha_viz.models.offload import linear_in_out
from mha_viz.trace import Latent

Seen = list[tuple[str, torch.Tensor, torch.Tensor]]  # (linear module name, its input, its output) in the probe


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    return bool(torch.allclose(a, b, rtol=0.0, atol=1e-6 * (1 + float(b.abs().max()))))


def find_latent(name: str, call: Call, seen: Seen, modules: dict[str, torch.nn.Module]) -> tuple[str, str, int]:
    """(W_UKV's module, the down-projection's module, d_rope) of a latent-attention layer, else ("", "", 0).

    Shapes: call.k [b, kv, n, d_nope + d_rope]; call.v [b, kv, n, d_v]; W_UKV's output [b, n, kv * (d_nope + d_v)]."""
    b, kv, n, dk = call.k.shape
    dv = int(call.v.shape[-1])
    up = ""
    d_nope = 0
    flat = [(mod, x.reshape(b, -1, x.shape[-1]), y.reshape(b, -1, y.shape[-1])) for mod, x, y in seen
            if mod.startswith(name + ".") and x.numel() and y.numel()]  # fmt: skip
    # (DeepSeek-V3 views its latent as one head: [b, 1, n, d_c])
    for mod, x, y in flat:
        per = y.shape[-1] // kv
        if tuple(y.shape) != (b, n, kv * per) or not dv < per < dk + dv:
            continue
        if getattr(modules.get(mod), "bias", None) is not None:
            continue  # (no latent model has a bias here; one would need adding back)
        heads = y.view(b, n, kv, per).transpose(1, 2)  # [b, kv, n, d_nope + d_v]
        dn = per - dv
        if _same(heads[..., dn:], call.v) and _same(heads[..., :dn], call.k[..., :dn]) and x.shape[-1] < y.shape[-1]:
            up, d_nope = mod, dn
            break
    d_rope = dk - d_nope
    rope = call.k[..., d_nope:]  # [b, kv, n, d_rope]: rotated, the same for every head
    if not up or not d_rope or not _same(rope, rope[:, :1].expand_as(rope)):
        return "", "", 0
    d_c = next(x.shape[-1] for mod, x, _ in flat if mod == up)
    down = ""
    for mod, _, y in flat:
        lengths = y.shape[-1] == d_c + d_rope and y.shape[:-1] == (b, n)
        if lengths and _same(y[..., d_c:].norm(dim=-1), rope[:, 0].norm(dim=-1)):
            down = mod
    return up, down, d_rope


def latent_of(model: torch.nn.Module, up: str, call: Call) -> Latent | None:
    """Batch item 0's latent of a recorded call of a latent-attention layer (W_UKV is module ``up``), or None
    where nothing latent was recorded. Shapes: see trace.Latent."""
    if not up or call.c_kv is None:
        return None
    w, _ = linear_in_out(model.get_submodule(up))  # [d_c, kv * (d_nope + d_v)]
    kv, dv = int(call.v.shape[1]), int(call.v.shape[-1])
    d_c = int(w.shape[0])
    w = w.reshape(d_c, kv, -1).permute(1, 0, 2)  # [kv, d_c, d_nope + d_v]
    d_nope = int(w.shape[-1]) - dv
    return Latent(
        c_kv=call.c_kv[0].clone(),  # [n, d_c]
        k_rope=call.k[0, 0, :, d_nope:].clone(),  # [n, d_rope]: as every head uses it (rotated)
        k_rope_pre=None if call.k_rope_pre is None else call.k_rope_pre[0].clone(),  # [n, d_rope]
        W_UK=w[..., :d_nope].contiguous(),  # [kv, d_c, d_nope]
        W_UV=w[..., d_nope:].contiguous(),  # [kv, d_c, d_v]
    )

"""Multi-head attention, traced: pure torch math (no Hugging Face, no Streamlit).

The numbered steps follow the source documents (seed 000):
X -> Q_i, K_i, V_i -> Q_i K_i^T * scale -> mask -> softmax (row by row) -> . V_i -> concat -> . W^O.
"""

from __future__ import annotations

import torch

from mha_viz.config import DTYPE_NAMES
from mha_viz.trace import AttentionTrace, AttentionWeights, MhaVizError

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}


def available_devices() -> list[str]:
    """Devices this machine can run on, best first (always ends with "cpu")."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return [*found, "cpu"]


def resolve_device(device: str = "auto") -> torch.device:
    """Turn "auto" | "cpu" | "cuda" | "mps" into a torch.device, with a clear error if absent."""
    options = available_devices()
    if device == "auto":
        return torch.device(options[0])
    if device not in ("cpu", "cuda", "mps"):
        raise MhaVizError(f"unknown device {device!r}; choose one of auto, {', '.join(options)}")
    if device not in options:
        raise MhaVizError(f"device {device!r} is not available here; choose one of auto, {', '.join(options)}")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """ "float32" | "float64" (or the torch dtype itself) -> torch dtype."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if dtype in DTYPES:
        return DTYPES[dtype]
    raise MhaVizError(f"unsupported dtype {dtype!r}; choose float32 or float64")


_DEVICE_CACHE: dict[str, torch.device] = {}


def _device(device: str | torch.device) -> torch.device:
    """resolve_device, remembered per name (checking for a GPU on every call costs time)."""
    if isinstance(device, torch.device):
        return device
    if device not in _DEVICE_CACHE:
        _DEVICE_CACHE[device] = resolve_device(device)
    return _DEVICE_CACHE[device]


def build_mask(
    n_query: int,
    n_key: int,
    causal: bool = False,
    key_mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Which (query, key) pairs may attend; None when everything may.

    Shapes: key_mask [key_pos] bool (False = padding); attn_mask [query_pos, key_pos] bool;
    returns [query_pos, key_pos] bool (True = allowed) or None.
    """
    allowed = None
    if causal:
        allowed = torch.ones(n_query, n_key, dtype=torch.bool).tril()  # [q, k] key <= query
    if key_mask is not None:
        km = key_mask.to(torch.bool).reshape(1, n_key)  # [1, k]
        allowed = km.expand(n_query, n_key) if allowed is None else allowed & km
    if attn_mask is not None:
        am = attn_mask.to(torch.bool)
        if tuple(am.shape) != (n_query, n_key):
            raise MhaVizError(f"attn_mask has shape {tuple(am.shape)}, expected {(n_query, n_key)}")
        allowed = am if allowed is None else allowed & am
    return allowed


def _softmax(scores: torch.Tensor, sink: torch.Tensor | None) -> torch.Tensor:
    """Row softmax, with a sink logit per head counted in the denominator when given (then dropped).
    Shapes: scores [..., h, q, k]; sink [h]; returns [..., h, q, k]."""
    if sink is None:
        return torch.softmax(scores, dim=-1)
    column = sink.to(scores).reshape(-1, 1, 1).expand(*scores.shape[:-1], 1)  # [..., h, q, 1]
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1].contiguous()  # [..., h, q, k]


def attention_pattern(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    scale: float,
    softcap: float | None = None,
    bias: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
    sink: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps 2-4: scores = q kᵀ · scale → soft-cap → + bias → mask → softmax, row by row.

    ``sink``: learned per-head sink logits (gpt-oss): each row's softmax also counts exp(sink) in its
    denominator, and the sink's share (1 − the row's sum) goes to no token.

    Leading batch axes are allowed. A query row whose keys are all masked is flagged in ``dead`` and gets what
    transformers' eager attention gives it (never NaN): its mask adds the dtype's minimum to every score, which
    makes them all equal, so the row spreads evenly over every key (1 / k_pos each); with a sink, the sink takes it
    all (zeros).
    Shapes: q [..., n_heads, q_pos, d_head]; k [..., n_kv_heads, k_pos, d_head]; bias and allowed
    broadcast to [..., n_heads, q_pos, k_pos]; sink [n_heads]; returns scores and pattern [..., n_heads, q_pos,
    k_pos], dead [..., n_heads | 1, q_pos] bool.
    """
    h, kv = q.shape[-3], k.shape[-3]
    k_h = k if kv == h else k.repeat_interleave(h // kv, dim=-3)  # [..., h, k_pos, dh]
    scores = torch.matmul(q, k_h.transpose(-1, -2))  # [..., h, q_pos, k_pos], a fresh tensor: edited in place
    if scale != 1.0:
        scores.mul_(scale)
    if softcap is not None:  # logit soft-capping (Gemma 2): softcap · tanh(scores / softcap)
        scores.div_(softcap).tanh_().mul_(softcap)
    if bias is not None:  # additive position bias (T5) and any additive part of the mask
        scores = scores + bias.to(scores.dtype) if bias.dim() > scores.dim() else scores.add_(bias.to(scores.dtype))
    if allowed is None:
        none_dead = torch.zeros(scores.shape[:-1], dtype=torch.bool, device=scores.device)  # [..., h, q_pos]
        return scores, _softmax(scores, sink), none_dead
    allowed = allowed.to(scores.device)
    scores.masked_fill_(~allowed, float("-inf"))
    dead = ~allowed.any(dim=-1)  # [..., h | 1, q_pos]
    if sink is not None:  # the sink takes a dead row's whole mass: its weights are 0, never NaN
        return scores, _softmax(scores, sink), dead
    pattern = torch.softmax(scores, dim=-1)  # [..., h, q_pos, k_pos]
    if bool(dead.any()):  # all-masked rows: even over every key, as the model's eager softmax gives them (not NaN)
        pattern.masked_fill_(dead.unsqueeze(-1), 1.0 / scores.shape[-1])
    return scores, pattern, dead


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    W_O: torch.Tensor | None,
    b_O: torch.Tensor | None = None,
    *,
    scale: float,
    softcap: float | None = None,
    bias: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
    sink: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Steps 2-7 from q, k, v as the model uses them: pattern, z = pattern · V, concat, output.

    Shapes: q, k [h | n_kv_heads, pos, dh]; v [n_kv_heads, k_pos, dv] (dv = dh except in latent attention);
    W_O [h, dv, d_model] (None: no output, the caller's); b_O [d_model]; bias [h | 1, q_pos, k_pos]; allowed
    [q_pos, k_pos] or [h | 1, q_pos, k_pos] bool. Returns scores, pattern [h, q_pos, k_pos], z [h, q_pos, dv],
    concat [q_pos, h*dv], output [q_pos, d_model] (unless W_O is None), dead_rows [q_pos].
    """
    h, n = q.shape[:2]
    dv = v.shape[-1]  # the value head size: d_head, or a latent-attention model's own d_v (≠ q/k's)
    scores, pattern, dead = attention_pattern(
        q, k, scale=scale, softcap=softcap, bias=bias, allowed=allowed, sink=sink
    )  # fmt: skip
    v_h = v if v.shape[0] == h else v.repeat_interleave(h // v.shape[0], dim=0)  # [h, k_pos, dv]
    z = torch.bmm(pattern, v_h)  # [h, q_pos, dv]
    concat = z.transpose(0, 1).reshape(n, h * dv)  # [q_pos, h*dv]
    dead_rows = dead.reshape(-1, dead.shape[-1]).any(dim=0).expand(n)  # [q_pos] (a mask may be one row: [1])
    if W_O is None:  # the caller computes the output (W^O chosen per token: a mixture of attention heads)
        return {"scores": scores, "pattern": pattern, "z": z, "concat": concat, "dead_rows": dead_rows}
    w_o = W_O.reshape(h * dv, W_O.shape[-1]).to(concat.dtype)  # [h*dv, d_model]
    output = concat @ w_o if b_O is None else torch.addmm(b_O.to(concat.dtype), concat, w_o)  # [q_pos, d_model]
    return {"scores": scores, "pattern": pattern, "z": z, "concat": concat, "output": output, "dead_rows": dead_rows}


def to_cpu(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor (no copy when it is one already)."""
    return t if t.device.type == "cpu" else t.detach().to("cpu")


def compute_trace(
    weights: AttentionWeights,
    x: torch.Tensor,
    tokens: tuple[str, ...] | None = None,
    *,
    causal: bool = False,
    key_mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    scaled: bool = True,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "float32",
) -> AttentionTrace:
    """Run one multi-head attention layer from its input X and keep every intermediate.

    The "one big matrix" form: a single Q|K|V projection, a reshape into heads and batched
    matmuls over the head axis (no Python loop over heads). ``scaled=False`` drops the
    1/sqrt(d_head) factor (to show softmax saturation). A query row whose keys are all masked
    spreads evenly over every key, as in transformers' eager attention, and is flagged in ``dead_rows`` (never
    NaN). Weights or inputs so large that the scores overflow raise MhaVizError instead of returning a NaN pattern.

    Shapes: x [pos, d_model]; key_mask [pos] bool; attn_mask [pos, pos] bool; returns an
    AttentionTrace (see mha_viz.trace for every shape), detached on the CPU.
    """
    if x.ndim != 2 or x.shape[1] != weights.d_model:
        raise MhaVizError(f"x must be [pos, d_model={weights.d_model}], got {tuple(x.shape)}")
    n = int(x.shape[0])
    if n < 1:
        raise MhaVizError("there are no tokens to attend over")
    if tokens is not None and len(tokens) != n:
        raise MhaVizError(f"{len(tokens)} token labels for {n} positions")
    dev = _device(device)
    w = weights.to(dev, resolve_dtype(dtype))
    h, kv, dh = w.n_heads, w.n_kv_heads, w.d_head
    allowed = build_mask(n, n, causal, key_mask, attn_mask)

    with torch.no_grad():
        x = x.to(device=dev, dtype=w.dtype)  # [pos, d_model]
        # 1. Q, K, V for all heads with one matmul, then split into heads.
        w_qkv, b_qkv = w.packed_qkv  # [d_model, (h+2kv)*dh], [(h+2kv)*dh]
        qkv = x @ w_qkv if b_qkv is None else torch.addmm(b_qkv, x, w_qkv)  # [pos, (h+2kv)*dh]
        q, k, v = qkv.split([h * dh, kv * dh, kv * dh], dim=1)
        q = q.view(n, h, dh).transpose(0, 1)  # [h, pos, dh]
        k = k.view(n, kv, dh).transpose(0, 1)  # [kv, pos, dh]
        v = v.view(n, kv, dh).transpose(0, 1)  # [kv, pos, dh]
        # 2.-7. scores, mask, softmax, · V, concat, · W^O.
        scale = w.scale_factor if scaled else 1.0
        parts = attend(q, k, v, w.W_O, w.b_O, scale=scale, allowed=allowed)
        # Never draw or export NaN: one check (one device sync) on what every view shows.
        if not bool(torch.isfinite(parts["pattern"]).all() & torch.isfinite(parts["output"]).all()):
            raise MhaVizError(
                f"the attention computation overflowed {str(w.dtype).removeprefix('torch.')} (the pattern or output "
                "has NaN or infinite values); use smaller weights/scale or smaller embeddings"
            )

    labels = tuple(tokens) if tokens is not None else tuple(str(i) for i in range(n))
    return AttentionTrace(
        tokens=labels,
        x=to_cpu(x),
        q=to_cpu(q),
        k=to_cpu(k),
        v=to_cpu(v),
        W_O=to_cpu(w.W_O),
        b_O=None if w.b_O is None else to_cpu(w.b_O),
        scale=scale,
        causal=causal,
        **{name: to_cpu(t) for name, t in parts.items()},
    )


def loop_attention(
    weights: AttentionWeights,
    x: torch.Tensor,
    allowed: torch.Tensor | None = None,
    scaled: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The "small matrices" form of the source documents: a Python loop over heads.

    Slow and plain on purpose: the reference that tests hold the batched form to.
    Shapes: x [pos, d_model]; allowed [pos, pos] bool; returns pattern [h, pos, pos], output [pos, d_model].
    """
    scale = weights.scale_factor if scaled else 1.0
    patterns, heads = [], []
    for i in range(weights.n_heads):
        g = i // weights.group  # the key/value head this query head uses
        q_i = x @ weights.W_Q[i]  # [pos, dh]
        k_i = x @ weights.W_K[g]  # [pos, dh]
        v_i = x @ weights.W_V[g]  # [pos, dh]
        if weights.b_Q is not None:
            q_i = q_i + weights.b_Q[i]
        if weights.b_K is not None:
            k_i = k_i + weights.b_K[g]
        if weights.b_V is not None:
            v_i = v_i + weights.b_V[g]
        s_i = (q_i @ k_i.T) * scale  # [pos, pos]
        if allowed is not None:  # as transformers' eager attention: the dtype's minimum added where masked
            s_i = s_i + torch.zeros_like(s_i).masked_fill(~allowed, torch.finfo(s_i.dtype).min)
        p_i = torch.softmax(s_i, dim=-1)  # [pos, pos]
        patterns.append(p_i)
        heads.append(p_i @ v_i)  # [pos, dh]
    concat = torch.cat(heads, dim=1)  # [pos, h*dh]
    w_o = weights.W_O.reshape(weights.n_heads * weights.d_head, weights.d_model)  # [h*dh, d_model]
    output = concat @ w_o  # [pos, d_model]
    if weights.b_O is not None:
        output = output + weights.b_O
    return torch.stack(patterns), output

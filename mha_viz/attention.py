"""Multi-head attention, traced: pure torch math (no Hugging Face, no Streamlit).

The numbered steps follow the source documents (seed 000):
X -> Q_i, K_i, V_i -> Q_i K_i^T * scale -> mask -> softmax (row by row) -> . V_i -> concat -> . W^O.
"""

from __future__ import annotations

import torch

from mha_viz.trace import AttentionTrace, AttentionWeights, MhaVizError

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}


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
    """Run one multi-head attention layer and keep every intermediate.

    The "one big matrix" form: a single Q|K|V projection, a reshape into heads and batched
    matmuls over the head axis (no Python loop over heads). ``scaled=False`` drops the
    1/sqrt(d_head) factor (to show softmax saturation). A query row whose keys are all masked
    gets an all-zero pattern row and is flagged in ``dead_rows`` (never NaN).

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
    dt = resolve_dtype(dtype)
    w = weights.to(dev, dt)
    h, kv, dh = w.n_heads, w.n_kv_heads, w.d_head
    scale = w.scale_factor if scaled else 1.0
    allowed = build_mask(n, n, causal, key_mask, attn_mask)

    with torch.no_grad():
        x = x.to(device=dev, dtype=dt)  # [pos, d_model]
        # 1. Q, K, V for all heads with one matmul, then split into heads.
        w_qkv, b_qkv = w.packed_qkv  # [d_model, 3*h*dh], [3*h*dh]
        qkv = x @ w_qkv if b_qkv is None else torch.addmm(b_qkv, x, w_qkv)  # [pos, (h+2kv)*dh]
        q, k, v = qkv.split([h * dh, kv * dh, kv * dh], dim=1)
        q = q.view(n, h, dh).transpose(0, 1)  # [h, pos, dh]
        k = k.view(n, kv, dh).transpose(0, 1)  # [kv, pos, dh]
        v = v.view(n, kv, dh).transpose(0, 1)  # [kv, pos, dh]
        if w.rope_theta is not None:  # rotary position embeddings on Q and K
            q, k = rotary(q, w.rope_theta), rotary(k, w.rope_theta)
        k_h, v_h = (k, v) if kv == h else (t.repeat_interleave(h // kv, dim=0) for t in (k, v))  # [h, pos, dh]
        # 2. Scores = Q K^T * scale.
        scores = torch.bmm(q, k_h.transpose(1, 2))  # [h, q_pos, k_pos]
        if scale != 1.0:
            scores.mul_(scale)
        # 3. Mask: disallowed pairs get -inf before the softmax.
        dead = torch.zeros(n, dtype=torch.bool)  # [q_pos]
        if allowed is not None:
            allowed = allowed.to(dev)
            scores.masked_fill_(~allowed, float("-inf"))
            dead = ~allowed.any(dim=1)  # [q_pos]
        # 4. Softmax row by row (each query's weights over the keys sum to 1).
        pattern = torch.softmax(scores, dim=-1)  # [h, q_pos, k_pos]
        if allowed is not None and bool(dead.any()):
            pattern.masked_fill_(dead.view(1, n, 1), 0.0)  # all-masked rows: zeros, not NaN
        # 5. Weighted sum of values, per head.
        z = torch.bmm(pattern, v_h)  # [h, pos, dh]
        # 6. Concat heads; 7. mix them with W^O: output = concat @ W_O + b_O.
        concat = z.transpose(0, 1).reshape(n, h * dh)  # [pos, h*dh]
        w_o = w.W_O.view(h * dh, w.d_model)  # [h*dh, d_model]
        output = concat @ w_o if w.b_O is None else torch.addmm(w.b_O, concat, w_o)  # [pos, d_model]

    def cpu(t: torch.Tensor) -> torch.Tensor:  # no copy when the trace ran on the CPU
        return t if t.device.type == "cpu" else t.detach().to("cpu")

    labels = tuple(tokens) if tokens is not None else tuple(str(i) for i in range(n))
    return AttentionTrace(
        tokens=labels,
        x=cpu(x),
        q=cpu(q),
        k=cpu(k),
        v=cpu(v),
        scores=cpu(scores),
        pattern=cpu(pattern),
        z=cpu(z),
        concat=cpu(concat),
        output=cpu(output),
        W_O=cpu(w.W_O),
        dead_rows=cpu(dead),
        scale=scale,
        causal=causal,
    )


def rotary(t: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embeddings as LLaMA applies them (rotate-half form), positions 0..pos-1.

    Shapes: t [heads, pos, d_head] -> same.
    """
    dh, n = t.shape[-1], t.shape[-2]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=torch.int64).float() / dh))  # [dh/2]
    freqs = torch.arange(n, dtype=torch.float32)[:, None] * inv_freq[None, :]  # [pos, dh/2]
    emb = torch.cat([freqs, freqs], dim=-1).to(t.device)  # [pos, dh]
    cos, sin = emb.cos().to(t.dtype), emb.sin().to(t.dtype)
    half = dh // 2
    rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)  # [heads, pos, dh]
    return t * cos + rotated * sin


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
        if weights.rope_theta is not None:
            q_i, k_i = rotary(q_i[None], weights.rope_theta)[0], rotary(k_i[None], weights.rope_theta)[0]
        s_i = (q_i @ k_i.T) * scale  # [pos, pos]
        if allowed is not None:
            s_i = s_i.masked_fill(~allowed, float("-inf"))
        p_i = torch.softmax(s_i, dim=-1).nan_to_num(0.0)  # [pos, pos]
        patterns.append(p_i)
        heads.append(p_i @ v_i)  # [pos, dh]
    concat = torch.cat(heads, dim=1)  # [pos, h*dh]
    w_o = weights.W_O.reshape(weights.n_heads * weights.d_head, weights.d_model)  # [h*dh, d_model]
    output = concat @ w_o  # [pos, d_model]
    if weights.b_O is not None:
        output = output + weights.b_O
    return torch.stack(patterns), output

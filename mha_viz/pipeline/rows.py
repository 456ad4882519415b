"""Long texts without [L, H, n, n]: chosen query rows of a layer's pattern, one (query, key) weight per layer ×
head, and every layer's pattern block-averaged as it is computed.

Softmax works row by row, so the rows of a pattern computed from the model's recorded q (those rows only) and k
are the rows of the whole pattern: every value here is the model's own (the same engine as pipeline.layer_trace,
on the same recorded q, k, bias and mask). Only one chunk of rows of one layer is held at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from mha_viz.analysis.norms import row_shares
from mha_viz.attention import attention_pattern, resolve_device, resolve_dtype
from mha_viz.config import Config
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline.road import Recording, allowed_keys, check_match, layer_trace
from mha_viz.pipeline.what_ifs import edited_wo
from mha_viz.pooling import block_means, pool_factor
from mha_viz.trace import MhaVizError

CHUNK_CELLS = 2**23  # scores computed at once (h × rows × keys): about 32 MB of float32


def _value_norms(lm: LoadedModel, rec: Recording, part: str, layer: int, config: Config) -> np.ndarray:
    """‖v_j W_O^h‖ with the sidebar's W^O edits (as norms.value_norms on the layer's trace). Shapes: [h, n_k]."""
    call = rec.run.calls[(part, layer)]
    h = call.q.shape[1]
    w_o, _ = edited_wo(lm, lm.site(part, layer), call, config)  # [h, dv, d]
    v = call.v[0].to(resolve_dtype(config.dtype)).double()  # [kv, n_k, dv]
    per_head = v[torch.arange(h) // (h // v.shape[0])]  # [h, n_k, dv]
    return (per_head @ w_o.to(resolve_dtype(config.dtype)).double()).norm(dim=-1).numpy()


def layer_rows(
    lm: LoadedModel, rec: Recording, part: str | None, layer: int, config: Config, rows: Sequence[int] | slice,
    measure: str = "weight",
) -> np.ndarray:  # fmt: skip
    """The rows ``rows`` of one layer's shown pattern (weights, or row-normalised contributions as
    norms.shown_pattern), exactly as pipeline.layer_trace computes them. Shapes: returns [h, r, n_k] float32."""
    part = lm.part(part)
    call = rec.run.calls[(part, layer)]
    n = int(call.q.shape[-2])
    index = torch.arange(n)[rows] if isinstance(rows, slice) else torch.as_tensor(list(rows), dtype=torch.long)
    if config.heads is not None and config.heads != call.q.shape[1]:  # re-split heads: rebuilt from X (small)
        from mha_viz.analysis.norms import shown_pattern

        return shown_pattern(layer_trace(lm, rec, part, layer, config), measure)[:, index.numpy()]
    check_match(lm, call, part, layer)  # as layer_trace: a pattern that does not match the model is never shown
    dev, dt = resolve_device(config.device), resolve_dtype(config.dtype)
    allowed = allowed_keys(call, part, config, index)  # [1|h, r, k]
    scale = call.scaling if config.scaled else 1.0
    with torch.no_grad():
        q = call.q[0][:, index].to(device=dev, dtype=dt)  # [h, r, dh]
        k = call.k[0].to(device=dev, dtype=dt)  # [kv, n_k, dh]
        bias = None if call.bias is None else call.bias[0][..., index, :].to(device=dev, dtype=dt)
        _, pattern, _ = attention_pattern(q, k, scale=scale, softcap=call.softcap, bias=bias, sink=call.sink,
                                          allowed=None if allowed is None else allowed.to(dev))  # fmt: skip
    p = pattern.float().cpu().numpy()  # [h, r, n_k]
    if not np.isfinite(p).all():
        raise MhaVizError(f"{lm.name}'s attention in {part} layer {layer} overflowed; nothing is shown rather than NaN")
    if measure == "weight":
        return p
    if measure != "contribution":
        raise ValueError(f"unknown measure {measure!r}")
    return row_shares(pattern.double().cpu().numpy() * _value_norms(lm, rec, part, layer, config)[:, None, :])


def focus_weights(
    lm: LoadedModel, rec: Recording, part: str | None, config: Config, q: int, k: int, measure: str = "weight"
) -> np.ndarray:
    """Query ``q``'s weight (or contribution share) on key ``k`` in every layer × head: patterns[:, :, q, k]
    without the patterns. Shapes: returns [L, H] float32."""
    return focus_rows(lm, rec, part, config, q, measure)[:, :, k]


def focus_rows(
    lm: LoadedModel, rec: Recording, part: str | None, config: Config, q: int, measure: str = "weight"
) -> np.ndarray:
    """Query ``q``'s whole row in every layer × head: patterns[:, :, q, :] without the patterns.
    Shapes: returns [L, H, n_k] float32."""
    part = lm.part(part)
    return np.stack([layer_rows(lm, rec, part, i, config, [q], measure)[:, 0] for i in range(lm.n_layers(part))])


def focus_column(
    lm: LoadedModel, rec: Recording, part: str | None, config: Config, k: int, queries: Sequence[int] | None = None
) -> np.ndarray:
    """Query rows' weight on key ``k`` in every layer × head: patterns[:, :, queries, k] without the patterns (every
    query by default, in chunks of CHUNK_CELLS scores; only the column kept). Shapes: returns [L, H, n_queries]."""
    part = lm.part(part)
    out = []
    for layer in range(lm.n_layers(part)):
        if queries is not None:
            out.append(layer_rows(lm, rec, part, layer, config, list(queries))[:, :, k])
            continue
        call = rec.run.calls[(part, layer)]
        h, n, nk = int(call.q.shape[1]), int(call.q.shape[-2]), int(call.k.shape[-2])
        step = max(1, CHUNK_CELLS // max(1, h * nk))
        out.append(np.concatenate([layer_rows(lm, rec, part, layer, config, slice(r, min(n, r + step)))[:, :, k]
                                   for r in range(0, n, step)], axis=1))  # fmt: skip
    return np.stack(out)


def recorded_tiles(
    lm: LoadedModel, rec: Recording, part: str, config: Config, f: int, told: Callable[[int, int], None] | None = None
) -> np.ndarray | None:
    """Every layer's weights as f×f block means, when they are what ``config`` would show (no what-if that changes
    the weights: re-split heads, an added causal mask, no scaling; float32 on the CPU; else None): kept during the
    recorded pass (Call.tiles: a short call's checked pattern, pooled as it was computed), or computed on demand from
    a long call's q, k and row statistics (Call.pooled_map; the caller caches the result).
    ``told(done, total)`` after each layer (a long text's maps take seconds a layer). Shapes: [L, H, m_q, m_k] f32."""
    calls = [rec.run.calls[(part, i)] for i in range(lm.n_layers(part))]
    if config.heads not in (None, int(calls[0].q.shape[1])) or config.causal or not config.scaled:
        return None
    if resolve_device(config.device).type != "cpu" or resolve_dtype(config.dtype) != torch.float32:
        return None
    if any((c.tiles is None or c.tile_f != f) and c.row_lse is None for c in calls):
        return None
    if not all(c.delta <= 1e-4 for c in calls):  # as layer_trace: a pattern that does not match is never shown
        bad = next(i for i, c in enumerate(calls) if not c.delta <= 1e-4)
        raise MhaVizError(f"mha-viz could not reproduce {lm.name}'s attention in {part} layer {bad}")
    out = []
    for i, c in enumerate(calls):
        out.append(c.tiles if c.tiles is not None and c.tile_f == f else c.pooled_map(f))  # [H, m_q, m_k]
        if told is not None:
            told(i + 1, len(calls))
    return np.stack(out)


def renormalised(p: np.ndarray, keep_k: np.ndarray | None) -> np.ndarray:
    """Rows restricted to the kept keys and renormalised to sum to 1 (all-zero rows stay 0), as
    analysis.drop_special. Shapes: [h, r, n_k] -> [h, r, m_k]."""
    if keep_k is None:
        return p
    sub = p[..., keep_k]
    total = sub.sum(-1, keepdims=True)
    return np.divide(sub, total, out=np.zeros_like(sub), where=total > 0).astype(p.dtype, copy=False)


def pooled_patterns(
    lm: LoadedModel, rec: Recording, part: str | None, config: Config, max_cells: int, measure: str = "weight",
    keep: Sequence[int] | None = None, keep_k: Sequence[int] | None = None,
    told: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, int]:  # fmt: skip
    """Every layer's pattern (restricted to the kept query rows ``keep`` and key columns ``keep_k`` and
    renormalised, as "hide special tokens" does; None keeps all) averaged over f×f blocks so each side has at
    most ``max_cells`` cells, computed a chunk of whole blocks of rows at a time. Equal to
    block_means(all_patterns[..., keep, :][..., keep_k] renormalised, f). ``told(done, total)`` after each layer.
    Shapes: returns ([L, H, m_q, m_k], f)."""
    part = lm.part(part)
    call = rec.run.calls[(part, 0)]
    rows = np.arange(call.q.shape[-2]) if keep is None else np.asarray(keep, dtype=int)
    cols = None if keep_k is None else np.asarray(keep_k, dtype=int)
    n_k = int(call.k.shape[-2]) if cols is None else len(cols)
    f = pool_factor(len(rows), n_k, max_cells)
    plain = keep is None and keep_k is None and measure == "weight"
    recorded = recorded_tiles(lm, rec, part, config, f, told) if plain else None
    if recorded is not None:
        return recorded, f
    h = int(call.q.shape[1]) if config.heads is None else int(config.heads)
    blocks = max(1, CHUNK_CELLS // max(1, h * n_k * f))  # row blocks per chunk
    out = []
    for layer in range(lm.n_layers(part)):
        parts = []
        for start in range(0, len(rows), blocks * f):
            chunk = rows[start : start + blocks * f]
            p = renormalised(layer_rows(lm, rec, part, layer, config, chunk.tolist(), measure), cols)  # [h, r, m_k]
            parts.append(block_means(p, f))
            del p  # not held while the next chunk's scores and pattern are computed (at 512 tokens: 12 MB less)
        out.append(np.concatenate(parts, axis=-2))
        if told is not None:
            told(layer + 1, lm.n_layers(part))
    return np.stack(out), f

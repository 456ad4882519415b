"""Tiled exact attention (mha_viz/tiles.py, models/tiled.py): a long call computed a block of query rows at a time
gives the model's own eager attention (its output, every layer's hidden state, its weights rebuilt from the rows'
softmax statistics, the pooled tile maps) on five kinds of attention: GQA with rotary embeddings and padding, a
sliding window shorter than the text, learned sinks (gpt-oss), soft-capping with its own scaling (gemma2), and an
encoder (bidirectional, padded)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tile_models import KINDS, TOL, _batch, _eager_pass, _model, _tiled_pass

from mha_viz import tiles
from mha_viz.pooling import block_means


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_tiled_attention_is_the_models_eager_attention(kind: str) -> None:
    model = _model(kind)
    ids, mask = _batch(96)
    if kind == "gemma2":  # in float64 the model's own eager pass turns a left-padded text to NaN: one text
        ids, mask = ids[:1], mask[:1]
    theirs = _eager_pass(model, ids, mask)
    ours, calls = _tiled_pass(model, ids, mask, block=4 * 96 * 10)  # blocks of 10 query rows (4 heads × 96 keys)
    assert len(calls) == 2
    real = mask.bool()
    for mine, want in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert float((mine - want)[real].abs().max()) <= TOL  # every layer's output, real tokens
    for call, weights in zip(calls, theirs.attentions, strict=True):
        assert call.row_lse is not None and call.row_lse.shape == weights.shape[:3]
        assert call.delta <= TOL  # the self-check on every row of every block
        allowed = tiles.allowed_of(call.allowed) if call.allowed is not None else None
        sink = call.sink is not None
        rebuilt = tiles.window_weights(call.q, call.k, call.row_lse, call.scaling, call.softcap, call.bias, allowed,
                                       sink, call.k.shape[-2])  # fmt: skip
        assert float((rebuilt - weights.float()).abs().max()) <= TOL  # every weight, from the statistics alone
    if kind == "gpt_oss":  # the sinks take a real share: rows do not sum to 1
        assert float(theirs.attentions[0][0].sum(-1).min()) < 0.9


def test_a_sliding_window_block_reads_only_its_keys() -> None:
    """A causal sliding-window block's key span: from the first row's window to the last row."""
    n, w = 64, 8
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    allowed = ((k <= q) & (k > q - w))[None, None]  # [1, 1, n, n]
    assert tiles.key_span(allowed[..., 20:30, :], n) == (13, 30)
    dead = allowed.clone()
    dead[..., 25, :] = False
    assert tiles.key_span(dead[..., 20:30, :], n) == (0, n)  # a row that sees nothing keeps every key


@pytest.mark.parametrize("kind", ["llama", "bert"])
def test_pooled_maps_equal_the_pooled_eager_weights_at_1024_tokens(kind: str) -> None:
    """The recording keeps no tile map (issue 38 §2: only q, k, v and the rows' statistics); any pooled map is computed
    on demand from them and equals the pooled eager weights, for every head and for a slice of heads."""
    model = _model(kind)
    n = 1024
    ids, mask = _batch(n)
    ids, mask = ids[:1], mask[:1]
    theirs = _eager_pass(model, ids, mask)
    _, calls = _tiled_pass(model, ids, mask, block=4 * n * 100, tile_cells=64)  # blocks of 100 rows
    for call, weights in zip(calls, theirs.attentions, strict=True):
        assert call.tiles is None and call.tile_f == 0  # nothing pooled during the pass
        for f in (16, 7):  # whole tiles, and partial last tiles on both sides
            want = block_means(weights[0].float().numpy(), f)  # [h, ceil(n/f), ceil(n/f)]
            got = call.pooled_map(f)
            assert got.shape == want.shape
            assert float(np.abs(got - want).max()) <= TOL
        assert (
            float(np.abs(call.pooled_map(16, slice(1, 3)) - block_means(weights[0, 1:3].float().numpy(), 16)).max())
            <= TOL
        )


@pytest.mark.parametrize("rows", [1, 5])
def test_row_lse_keeps_a_one_row_mask_for_every_row(rows: int) -> None:
    """A mask with one row (a padding mask over keys, or one query's own row) holds for every query row: it must
    not be dropped (it was: `_rows` gave None, and `~None` raised for the focus row of an untiled recording)."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, rows, 8, generator=g), torch.randn(1, 2, 7, 8, generator=g)  # [b, h, n, d], [b, kv, 7, d]
    allowed = torch.tensor([True, True, False, True, False, True, True]).reshape(1, 1, 1, 7)  # [1, 1, 1, n_k]
    add = torch.where(allowed, 0.0, -1e9)  # the same mask as eager's additive float
    s = (q.double() @ k.double().transpose(-1, -2)) * 0.5  # [1, 2, rows, 7]
    want = torch.logsumexp(s.masked_fill(~allowed, -float("inf")), -1)  # [1, 2, rows]
    assert torch.allclose(tiles.row_lse(q, k, 0.5, None, None, allowed), want, atol=1e-12)
    assert torch.allclose(tiles.row_lse(q, k, 0.5, None, add.double(), None), want, atol=1e-9)

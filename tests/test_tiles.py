"""Tiled exact attention (mha_viz/tiles.py, models/tiled.py): a long call computed a block of query rows at a time
gives the model's own eager attention (its output, every layer's hidden state, its weights rebuilt from the rows'
softmax statistics, the pooled tile maps) on five kinds of attention: GQA with rotary embeddings and padding, a
sliding window shorter than the text, learned sinks (gpt-oss), soft-capping with its own scaling (gemma2), and an
encoder (bidirectional, padded)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz import tiles
from mha_viz.models import capture
from mha_viz.pooling import block_means

_GQA = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 96, "vocab_size": 320, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2, "max_position_embeddings": 2048}  # fmt: skip
KINDS = {
    "llama": ({**_GQA}, torch.float32),
    "mistral": ({**_GQA, "sliding_window": 24}, torch.float32),
    "gpt_oss": (
        {
            **_GQA,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 24,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        torch.float32,
    ),
    "gemma2": (
        {
            **_GQA,
            "sliding_window": 24,
            "attn_logit_softcapping": 5.0,
            "query_pre_attn_scalar": 8,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        torch.float64,
    ),
    "bert": ({k: v for k, v in _GQA.items() if k not in ("num_key_value_heads", "head_dim")}, torch.float32),
}
TOL = 1e-5


def _model(kind: str) -> torch.nn.Module:
    import transformers

    cfg, dtype = KINDS[kind]
    config = transformers.AutoConfig.for_model(kind, **cfg)
    torch.manual_seed(0)
    cls = transformers.AutoModel if kind == "bert" else transformers.AutoModelForCausalLM
    model = cls.from_config(config, attn_implementation="eager").to(dtype).eval()
    if kind == "gpt_oss":  # learned sinks large enough to take a visible share
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.normal_(0.0, 2.0)
    return model


def _batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two texts: the first whole, the second left-padded by 7 (its first rows see no key: the eager softmax's
    all-masked rows). Shapes: ids, mask [2, n]."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 320, (2, n), generator=g)
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, :7] = 0
    ids[1, :7] = 0
    return ids, mask


def _tiled_pass(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, block: int, tile_cells: int = 0):
    capture.register()
    model.set_attn_implementation(capture.NAME)
    rec = capture.Recorder(extras=False, tile_block=block, tile_cells=tile_cells)
    try:
        with torch.no_grad(), capture.recording(rec):
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
    finally:
        model.set_attn_implementation("eager")
    return out, rec.calls


def _eager_pass(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True,
                     use_cache=False)  # fmt: skip


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
    model = _model(kind)
    n = 1024
    ids, mask = _batch(n)
    ids, mask = ids[:1], mask[:1]
    theirs = _eager_pass(model, ids, mask)
    _, calls = _tiled_pass(model, ids, mask, block=4 * n * 100, tile_cells=64)  # f = 16; blocks of 96 rows
    for call, weights in zip(calls, theirs.attentions, strict=True):
        want = block_means(weights[0].float().numpy(), 16)  # [h, 64, 64]
        assert call.tile_f == 16 and call.tiles.shape == want.shape
        assert float(np.abs(call.tiles - want).max()) <= TOL  # recorded during the pass
        allowed = tiles.allowed_of(call.allowed) if call.allowed is not None else None
        again = tiles.pooled(call.q, call.k, call.row_lse, 16, call.scaling, call.softcap, call.bias, allowed)
        assert float(np.abs(again.numpy() - want).max()) <= TOL  # recomputed on demand from the statistics

"""Differential attention (DiffLlama, issue 23): both attention calls of a layer are one recorded layer, the two
softmax maps of a head pair are the model's own (output_attentions), and their λ-weighted difference times both
halves of V, normed, is exactly what the model's W^O reads (a hook on o_proj)."""

from __future__ import annotations

import pytest
import torch

from conftest import _zoo_dir, tiny_causal_lm
from mha_viz.analysis.differential import difference, pair_of, pair_outputs
from mha_viz.analysis.steps import head_steps
from mha_viz.config import Config
from mha_viz.models.differential import differential_of
from mha_viz.pipeline import road
from zoo import eager_pass

TEXT = "The animal was tired because it walked"
CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "intermediate_size": 96, "max_position_embeddings": 128, "vocab_size": 320,
          "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip


def _lambda_away(model) -> None:  # λ well away from 0 (random init gives λ ≈ λ_init): the second map visibly counts
    for attn in (layer.self_attn for layer in model.model.layers):
        attn.lambda_q1.normal_(0, 0.5), attn.lambda_k1.normal_(0, 0.5)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> tuple:
    lm = road.load(Config(model=str(tiny_causal_lm(tmp_path_factory, "diffllama", CONFIG, _lambda_away))))
    return lm, road.record(lm, TEXT)


def _theirs(lm, layer: int, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """output_attentions [h, n, n], W^O's input [n, h·d_head] and output [n, d] of the model's own eager pass."""
    got: dict[str, torch.Tensor] = {}
    o_proj = lm.model.model.layers[layer].self_attn.o_proj

    def hook(_m, args, out) -> None:
        got["in"], got["out"] = args[0][0].detach(), out[0].detach()

    out = eager_pass(lm, ids, [o_proj.register_forward_hook(hook)])
    return out.attentions[layer][0], got["in"], got["out"]


@pytest.mark.parametrize("layer", [0, 1])
def test_both_maps_and_their_difference_are_the_models(loaded, layer: int) -> None:
    lm, rec = loaded
    assert lm.n_layers("decoder") == 2  # two attention calls per layer, one recorded layer each
    call = road.layer_call(lm, rec, "decoder", layer)
    d = differential_of(lm.model.get_submodule(lm.site("decoder", layer).name), call)
    assert d is not None and abs(d.lam - d.lam_init) > 0.05
    t = road.layer_trace(lm, rec, "decoder", layer, Config())  # the road's own trace (what Step by step opens)
    assert t.differential is not None and t.differential.lam == d.lam
    attn, wo_in, wo_out = _theirs(lm, layer, torch.tensor([rec.tokens.ids]))
    assert (t.pattern - attn).abs().max() <= 1e-6  # every head's softmax map: both maps of every pair
    h, n = t.n_heads, t.n_tokens
    pairs = pair_outputs(t)  # [h/2, n, 2·d_head]
    assert (pairs.transpose(0, 1).reshape(n, -1) - wo_in).abs().max() <= 1e-5  # what W^O reads
    assert (t.output - wo_out).abs().max() <= 1e-5
    j, k = pair_of(t, 3)
    assert (j, k) == (1, 3)
    diff = difference(t, j)
    assert (diff - (attn[j] - d.lam * attn[k])).abs().max() <= 1e-6
    torch.testing.assert_close(diff.sum(-1), torch.full((n,), 1 - d.lam))
    titles = [s.title for s in head_steps(t, 3)]
    assert any(title.startswith("differential map A_1 − λ · A_3") for title in titles), titles
    assert h == 4


def test_other_layers_have_no_differential(loaded, tmp_path_factory) -> None:
    lm = road.load(Config(model=_zoo_dir(tmp_path_factory, "llama")))
    call = road.layer_call(lm, road.record(lm, TEXT), "decoder", 0)
    assert call.v2 is None and differential_of(lm.model.get_submodule(lm.site("decoder", 0).name), call) is None

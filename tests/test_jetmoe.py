"""A mixture of attention heads (JetMoE's MoA, issue 23 §3): a router picks k experts per token, each with its own query
projection and W^O over shared K/V heads. Every head's pattern is the model's own (output_attentions), the routing is
the router's own top-k, and the trace's output — each token's heads through its chosen experts' W^O, weighted by the
gates — is exactly what the attention module returns to the residual stream (a hook on it)."""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_causal_lm
from mha_viz.analysis.norms import shown_pattern
from mha_viz.analysis.steps import head_steps
from mha_viz.config import Config
from mha_viz.models.run import output_projection
from mha_viz.pipeline import road
from mha_viz.trace import MhaVizError
from zoo import eager_pass

TEXT = "The animal was tired because it walked"
K, EXPERTS, KV = 2, 4, 2  # experts per token, experts, K/V heads: the call has K * KV = 4 heads
CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_key_value_heads": KV, "kv_channels": 16,
          "intermediate_size": 96, "num_local_experts": EXPERTS, "num_experts_per_tok": K,
          "max_position_embeddings": 128, "vocab_size": 320, "pad_token_id": 0, "bos_token_id": 1,
          "eos_token_id": 2}  # fmt: skip


def _order_one(model) -> None:  # weights of order 1 (the default init is 0.01): every difference below is visible
    for attn in (layer.self_attention for layer in model.model.layers):
        moa = attn.experts
        for w in (moa.router.layer.weight, moa.input_linear.weight, moa.output_linear.weight, attn.kv_proj.weight):
            w.normal_(0, 0.3)
        moa.bias.normal_(0, 0.3)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> tuple:
    lm = road.load(Config(model=str(tiny_causal_lm(tmp_path_factory, "jetmoe", CONFIG, _order_one))))
    return lm, road.record(lm, TEXT)


def _theirs(lm, layer: int, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The model's own eager pass: output_attentions [h, n, n], the attention module's output [n, d] and the
    router's logits [n, experts]."""
    got: dict[str, torch.Tensor] = {}
    attn = lm.model.model.layers[layer].self_attention

    def out_hook(_m, _args, out) -> None:
        got["out"] = out[0][0].detach()

    def router_hook(_m, _args, out) -> None:
        got["logits"] = out.detach().float()

    handles = [attn.register_forward_hook(out_hook), attn.experts.router.layer.register_forward_hook(router_hook)]
    out = eager_pass(lm, ids, handles)
    got["attn"] = out.attentions[layer][0]
    return got


def test_the_probe_finds_the_router_and_its_output(loaded) -> None:
    lm, _ = loaded
    for site in lm.sites:
        assert site.moa == site.name + ".experts" and site.wo == site.name
    assert lm.n_heads == K * KV


@pytest.mark.parametrize("layer", [0, 1])
def test_patterns_routing_and_output_are_the_models(loaded, layer: int) -> None:
    lm, rec = loaded
    t = road.layer_trace(lm, rec, None, layer, Config())
    theirs = _theirs(lm, layer, torch.tensor([rec.tokens.ids]))
    assert t.pattern.shape == theirs["attn"].shape == (K * KV, len(rec.tokens.ids), len(rec.tokens.ids))
    assert (t.pattern - theirs["attn"]).abs().max() <= 1e-6
    top, experts = theirs["logits"].topk(K, dim=1)  # [n, k]: the router's own choice, best first
    assert torch.equal(t.routing.experts, experts)
    assert torch.allclose(t.routing.gates, torch.softmax(top, dim=1), atol=1e-7)
    assert len({tuple(row) for row in experts.tolist()}) > 1  # tokens go to different experts
    assert theirs["out"].abs().max() > 0.1  # an output that differs visibly when wrong
    assert (t.output - theirs["out"]).abs().max() <= 1e-5
    b = 0 if t.b_O is None else t.b_O
    assert (t.head_out.sum(0) + b - t.output).abs().max() <= 1e-5  # each head's part, gate and expert included


def test_one_wo_for_every_token_would_be_wrong(loaded) -> None:
    """The test can fail: the layer's output with every token through expert 0 (or without the gates) is not it."""
    lm, rec = loaded
    t = road.layer_trace(lm, rec, None, 0, Config())
    w = t.routing.W_E  # [experts, kv, d_head, d]
    z = t.z.view(K, KV, *t.z.shape[1:])  # [k, kv, n, d_head]
    expert0 = torch.einsum("jgnd,gde->ne", z, w[0]) * 0.5
    ungated = torch.stack([torch.einsum("gnd,ngde->ne", z[j], w[t.routing.experts[:, j]]) for j in range(K)]).sum(0)
    for wrong in (expert0, ungated):
        assert (wrong + t.b_O - t.output).abs().max() > 1e-2


def test_usage_rows_have_k_experts(loaded) -> None:
    lm, rec = loaded
    t = road.layer_trace(lm, rec, None, 0, Config())
    usage = t.routing.usage()  # [n, experts]
    assert usage.shape == (len(rec.tokens.ids), EXPERTS)
    assert torch.equal((usage > 0).sum(1), torch.full((usage.shape[0],), K))
    assert torch.allclose(usage.sum(1), torch.ones(usage.shape[0]), atol=1e-6)


def test_step_by_step_shows_the_routing(loaded) -> None:
    lm, rec = loaded
    t = road.layer_trace(lm, rec, None, 0, Config())
    steps = head_steps(t, 3)
    router = next(s for s in steps if s.title.startswith("the router's choice"))
    assert router.number == 7 and router.col_labels == tuple(f"expert {e}" for e in range(EXPERTS))
    assert (router.z == t.routing.usage().numpy()).all()
    head = next(s for s in steps if s.title.startswith("head_3 · W^O of each token's choice 2"))
    assert (head.z == t.head_out[3].numpy()).all()
    assert (
        steps[-1].title.startswith("output = Σ over each token's chosen experts")
        and (steps[-1].z == t.output.numpy()).all()
    )


def test_what_ifs_on_one_wo_are_refused(loaded) -> None:
    lm, rec = loaded
    for config in (Config(wo="identity"), Config(ablate=(1,))):
        with pytest.raises(MhaVizError, match="chosen per token"):
            road.layer_trace(lm, rec, None, 0, config)
    with pytest.raises(MhaVizError, match="chosen per token"):
        shown_pattern(road.layer_trace(lm, rec, None, 0, Config()), "contribution")
    with pytest.raises(MhaVizError, match="chosen per token"):
        output_projection(lm, "decoder", 0)

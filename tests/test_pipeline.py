"""The one road from (config, text) to traces, as the CLI and the dashboard use it."""

from __future__ import annotations

import pytest
import torch

from conftest import SENTENCE
from mha_viz.config import Config
from mha_viz.models.run import token_embeddings
from mha_viz.pipeline.door import Ablate
from mha_viz.pipeline.door import run as door_run
from mha_viz.pipeline.own_road import own_trace
from mha_viz.pipeline.road import encode, traces
from mha_viz.studies.sweeps import ablation_effect
from mha_viz.trace import MhaVizError


def test_pretrained_config_changes_the_trace(minilm) -> None:
    tokens, keys, (base,) = traces(Config(), SENTENCE, layers=[1], lm=minilm)
    four = traces(Config(heads=4), SENTENCE, layers=[1], lm=minilm)[2][0]
    causal = traces(Config(causal=True), SENTENCE, layers=[1], lm=minilm)[2][0]
    ident = traces(Config(wo="identity"), SENTENCE, layers=[1], lm=minilm)[2][0]
    unscaled = traces(Config(scaled=False), SENTENCE, layers=[1], lm=minilm)[2][0]
    assert base.tokens == tokens.labels == keys.labels and base.pattern.shape[0] == 12 and four.pattern.shape[0] == 4
    assert torch.all(causal.pattern.triu(1) == 0) and not torch.all(base.pattern.triu(1) == 0)
    torch.testing.assert_close(ident.output, ident.concat)
    torch.testing.assert_close(ident.pattern, base.pattern)  # W^O does not change where heads look
    assert unscaled.scale == 1.0 and base.scale == pytest.approx(32**-0.5)
    torch.testing.assert_close(unscaled.scores, base.scores / base.scale, atol=1e-5, rtol=1e-5)


def test_resplit_from_recorded_input_equals_the_recorded_trace_at_same_count(minilm) -> None:
    """heads=None (recorded q, k, v) and the rebuilt-from-X path agree on an unchanged layer."""
    from mha_viz.attention import compute_trace
    from mha_viz.pipeline.road import layer_input, layer_weights, record

    rec = record(minilm, SENTENCE)
    recorded = traces(Config(), SENTENCE, layers=[3], lm=minilm)[2][0]
    rebuilt = compute_trace(layer_weights(minilm, rec, "encoder", 3), layer_input(rec, "encoder", 3), device="cpu")
    torch.testing.assert_close(rebuilt.pattern, recorded.pattern, atol=1e-6, rtol=0)
    torch.testing.assert_close(rebuilt.output, recorded.output, atol=1e-5, rtol=0)


def test_own_trace_embeddings(minilm) -> None:
    config = Config(model="own", d_model=384, n_heads=6, embeddings="model", positions=True)
    tokens, weights, trace = own_trace(minilm, SENTENCE, config)
    x = token_embeddings(minilm, tokens.ids, positions=True)
    torch.testing.assert_close(trace.x, x)
    emb = minilm.model.embeddings
    torch.testing.assert_close(x[2], emb.word_embeddings.weight[tokens.ids[2]] + emb.position_embeddings.weight[2])
    assert weights.n_heads == 6 and trace.pattern.shape == (6, len(tokens.ids), len(tokens.ids))
    with pytest.raises(MhaVizError, match="unknown embeddings"):
        own_trace(minilm, SENTENCE, Config(model="own", embeddings="glove"))


def test_whole_model_ablation_equals_zeroed_wo_columns(minilm) -> None:
    import copy

    ids = torch.tensor([encode(minilm, SENTENCE)[0].ids])
    plan = {("encoder", 1): [0, 3], ("encoder", 4): [11]}
    before = {n: p.clone() for n, p in minilm.model.named_parameters()}
    cut = door_run(minilm, ids, *(Ablate(p, la, tuple(hs)) for (p, la), hs in plan.items()), record=False)
    edited = copy.deepcopy(minilm.model)  # reference: zero the heads' input columns of W^O in a copy
    for (_, layer), heads in plan.items():
        dense = edited.encoder.layer[layer].attention.output.dense  # weight [out, in = heads * 32]
        with torch.no_grad():
            for h in heads:
                dense.weight[:, h * 32 : (h + 1) * 32] = 0
    with torch.no_grad():
        ref = edited(input_ids=ids).last_hidden_state
    torch.testing.assert_close(cut.hidden, ref, atol=1e-5, rtol=0)
    for n, p in minilm.model.named_parameters():
        assert torch.equal(p, before[n]), n  # the shared model is untouched
    intact = door_run(minilm, ids, record=False)
    assert not torch.allclose(intact.hidden, cut.hidden)
    effect = ablation_effect(minilm, SENTENCE, {("encoder", 1): [0, 3]})
    assert 0.5 < effect["embedding_cosine"] < 1.0 and effect["token_change"].shape == (15,)
    assert ablation_effect(minilm, SENTENCE, {})["embedding_cosine"] == pytest.approx(1.0)
    with pytest.raises(MhaVizError, match="heads are numbered 0 to 11"):
        door_run(minilm, ids, Ablate("encoder", 0, (12,)))
    with pytest.raises(MhaVizError, match="layers 0 to 5"):
        door_run(minilm, ids, Ablate("encoder", 6, (0,)))


def test_causal_lm_next_token_ablation(llama_dir: str) -> None:
    from mha_viz.models.load import load_model

    lm = load_model(llama_dir)
    effect = ablation_effect(lm, SENTENCE, {("decoder", 0): [1, 2]})
    assert len(effect["top_before"]) == 5 and len(effect["top_after"]) == 5
    probs = [p for _, p in effect["top_before"]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-9
    assert effect["top_before"] != effect["top_after"]

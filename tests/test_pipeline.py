"""The shared path from (model, text, settings) to traces, as the CLI and the dashboard use it."""

from __future__ import annotations

import pytest
import torch

from conftest import SENTENCE
from mha_viz.adapters import token_embeddings
from mha_viz.pipeline import OwnSpec, Settings, own_trace, pretrained_traces
from mha_viz.trace import MhaVizError


def test_pretrained_settings_change_the_trace(minilm) -> None:
    tokens, (base,) = pretrained_traces(minilm, SENTENCE, [1])
    _, (four,) = pretrained_traces(minilm, SENTENCE, [1], Settings(heads=4))
    _, (causal,) = pretrained_traces(minilm, SENTENCE, [1], Settings(causal=True))
    _, (ident,) = pretrained_traces(minilm, SENTENCE, [1], Settings(wo="identity"))
    assert base.tokens == tokens.labels and base.pattern.shape[0] == 12 and four.pattern.shape[0] == 4
    assert torch.all(causal.pattern.triu(1) == 0) and not torch.all(base.pattern.triu(1) == 0)
    torch.testing.assert_close(ident.output, ident.concat)
    torch.testing.assert_close(ident.pattern, base.pattern)  # W^O does not change where heads look


def test_own_trace_embeddings(minilm) -> None:
    spec = OwnSpec(d_model=384, n_heads=6, embeddings="model", positions=True)
    tokens, weights, trace = own_trace(minilm, SENTENCE, spec)
    x = token_embeddings(minilm, tokens.ids, positions=True)
    torch.testing.assert_close(trace.x, x)
    emb = minilm.model.embeddings
    torch.testing.assert_close(x[2], emb.word_embeddings.weight[tokens.ids[2]] + emb.position_embeddings.weight[2])
    assert weights.n_heads == 6 and trace.pattern.shape == (6, len(tokens.ids), len(tokens.ids))
    with pytest.raises(MhaVizError, match="unknown embeddings"):
        own_trace(minilm, SENTENCE, OwnSpec(embeddings="glove"))


def test_whole_model_ablation_equals_zeroed_wo_columns(minilm) -> None:
    import copy

    from mha_viz.adapters import run_ablated
    from mha_viz.loading import tokenize
    from mha_viz.pipeline import ablation_effect

    ids = torch.tensor([tokenize(minilm, SENTENCE).ids])
    before = {n: p.clone() for n, p in minilm.model.named_parameters()}
    hooked = run_ablated(minilm, ids, {1: [0, 3], 4: [11]})
    edited = copy.deepcopy(minilm.model)  # reference: zero the heads' input columns of W^O in a copy
    for layer, heads in {1: [0, 3], 4: [11]}.items():
        dense = edited.encoder.layer[layer].attention.output.dense  # weight [out, in = heads * 32]
        with torch.no_grad():
            for h in heads:
                dense.weight[:, h * 32 : (h + 1) * 32] = 0
    with torch.no_grad():
        ref = edited(input_ids=ids).last_hidden_state
    torch.testing.assert_close(hooked.hidden, ref, atol=1e-5, rtol=0)
    for n, p in minilm.model.named_parameters():
        assert torch.equal(p, before[n]), n  # the shared model is untouched
    intact = run_ablated(minilm, ids)
    assert not torch.allclose(intact.hidden, hooked.hidden)
    effect = ablation_effect(minilm, SENTENCE, {1: [0, 3]})
    assert 0.5 < effect["embedding_cosine"] < 1.0 and effect["token_change"].shape == (15,)
    assert ablation_effect(minilm, SENTENCE, {})["embedding_cosine"] == pytest.approx(1.0)
    with pytest.raises(MhaVizError, match="heads are numbered 0 to 11"):
        run_ablated(minilm, ids, {0: [12]})

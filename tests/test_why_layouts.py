"""The score split on layouts beyond the six of issue 37 (tests/test_why.py): Qwen3-Next's gated query projection
(W_Q writes [query | gate] per head) and per-head QK-norm, split exactly; its linear-attention layers, which the split
does not cover, named in the first source or refused in words; any other failure inside the split a refusal
(MhaVizError), never a RuntimeError. Real tiny Qwen3-Next models built from configs (tests/zoo.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import transformers

from conftest import SENTENCE, _tiny_tokenizer
from mha_viz.models.load import model_classes, prepare
from mha_viz.models.tokens import tokenize
from mha_viz.pipeline.door import run
from mha_viz.pipeline.scores import RecordSources, sides
from mha_viz.studies.why import why_at
from mha_viz.trace import MhaVizError
from zoo import ZOO, build

REL = 1e-4  # the tolerance, as in tests/test_why.py


@pytest.fixture(scope="module")
def qwen3_next():
    """The tiny Qwen3-Next of tests/test_new_attention_views.py: a linear-attention layer, then a full one."""
    return prepare(build("qwen3_next"), _tiny_tokenizer(), "tiny-qwen3_next")


def _tokens(lm):
    return tokenize(lm.tokenizer, SENTENCE, lm.max_tokens, lm.name)


def test_gated_query_split_sums_to_the_models_score(qwen3_next) -> None:
    """Failed before with RuntimeError (32 vs 16) in the frozen q-norm: W_Q's gate columns were taken as query."""
    lm, tokens = qwen3_next, _tokens(qwen3_next)
    i, j, jv = 10, 2, 4
    w = why_at(lm, tokens, 0, 1, i, j, jv)
    call = run(lm, torch.tensor([tokens.ids]), only=(w.part, 0)).calls[(w.part, 0)]
    group = call.q.shape[1] // call.k.shape[1]
    for key, terms, position in ((j, w.terms, w.position), (jv, w.terms_versus, w.position_versus)):
        own = call.scaling * float(call.q[0, 1, i].double() @ call.k[0, 1 // group, key].double())
        assert abs(float(terms.sum()) + position - own) <= REL * max(1.0, abs(own))
    lm.model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = lm.model(input_ids=torch.tensor([tokens.ids]), output_attentions=True)
    finally:
        lm.model.set_attn_implementation("mha_viz")
    row = [a for a in out.attentions if a is not None][-1][0, 1, i].double()  # the full-attention layer's weights
    assert w.weight == pytest.approx(float(row[j]), rel=1e-4, abs=1e-6)
    ratio = math.log(float(row[j]) / float(row[jv]))
    assert float(w.terms.sum()) - float(w.terms_versus.sum()) == pytest.approx(ratio, rel=1e-4, abs=1e-4)
    assert w.q_sources[0][0] == "embeddings + layer 0 (no softmax attention, not split)"


def test_a_layer_after_linear_attention_is_refused_in_words() -> None:
    """Full, linear, full: the second attention layer's input holds a linear-attention layer: refused, named."""
    config = transformers.AutoConfig.for_model(
        "qwen3_next",
        **{
            **ZOO["qwen3_next"],
            "num_hidden_layers": 3,
            "layer_types": ["full_attention", "linear_attention", "full_attention"],
        },
    )
    torch.manual_seed(0)
    model = model_classes("qwen3_next", False)[0].from_config(config, attn_implementation="eager").float().eval()
    lm = prepare(model, _tiny_tokenizer(), "tiny-qwen3_next-3")
    tokens = _tokens(lm)
    w = why_at(lm, tokens, 0, 0, 10, 2, 4)  # the first layer: its input is the embeddings alone
    assert w.q_sources[0][0] == "embeddings"
    with pytest.raises(MhaVizError, match=r"layers 1–1 of the model.*not softmax attention"):
        why_at(lm, tokens, 1, 0, 10, 2, 4)


def test_a_shape_mismatch_inside_the_split_is_a_refusal(qwen3_next) -> None:
    """A call whose heads are not the width W_Q writes (an unusual layout: here the recorded q and k cut to half
    their head size) meets a shape mismatch inside the split: a MhaVizError in words, not a RuntimeError."""
    lm, tokens = qwen3_next, _tokens(qwen3_next)
    part = lm.part(None)
    sources = RecordSources(part, 0, (2, 10))
    ran = run(lm, torch.tensor([tokens.ids]), sources, only=(part, 0), extras=False)
    call, rec = ran.calls[(part, 0)], ran.records[sources]
    cut = dataclasses.replace(call, q=call.q[..., :8], k=call.k[..., :8])
    with pytest.raises(MhaVizError, match=r"cannot follow layer 0's query/key path.*not supported"):
        sides(lm, part, 0, 0, rec, cut)

"""Parts and layer numbers come from the model's structure, not from one layer's mask on a short probe (issue 23
§1: a decoder whose sliding window was shorter than the 4-token probe had its sliding layers filed as an
"encoder" and its full layers as "decoder", each numbered from 0, so layer 0 returned the model's layer 1)."""

from __future__ import annotations

import pytest
import torch
import transformers
from references import TOL, id_tokens, reference

from mha_viz.config import Config
from mha_viz.models.load import prepare
from mha_viz.models.run import run_model
from mha_viz.pipeline.road import Recording, layer_trace
from zoo import _GQA

CASES = {  # name: (model_type, config overrides); windows of 1, 2 and 3 tokens, all or alternate layers sliding
    "mistral-w1": ("mistral", {"sliding_window": 1}),
    "mistral-w3": ("mistral", {"sliding_window": 3}),
    "gemma2-w1": ("gemma2", {"sliding_window": 1, "query_pre_attn_scalar": 16}),
    "gemma2-w2": ("gemma2", {"sliding_window": 2, "query_pre_attn_scalar": 16}),
    "gemma3-w3": ("gemma3_text", {"sliding_window": 3, "query_pre_attn_scalar": 16, "num_hidden_layers": 3}),
    # a hybrid: attention only in the model's layers 1 and 3 (short convolutions in 0 and 2)
    "lfm2-hybrid": (
        "lfm2",
        {"layer_types": ["conv", "full_attention", "conv", "full_attention"], "num_hidden_layers": 4},
    ),
}


def _build(model_type: str, overrides: dict) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **{**_GQA, **overrides})
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_layer_is_the_model_layer_of_its_number(case: str) -> None:
    model_type, overrides = CASES[case]
    lm = prepare(_build(model_type, overrides), None, model_type)
    eager = _build(model_type, overrides)  # the same weights, transformers' own eager attention
    assert lm.parts == ("decoder",), [(s.name, s.part, s.layer) for s in lm.sites]
    assert all(s.causal for s in lm.sites)
    attention_layers = (
        [i for i, t in enumerate(eager.config.layer_types) if "attention" in t]
        if hasattr(eager.config, "layer_types") and eager.config.layer_types
        else list(range(eager.config.num_hidden_layers))
    )
    assert [s.layer for s in lm.sites] == list(range(len(attention_layers)))  # numbered in model order
    assert [s.model_layer for s in lm.sites] == attention_layers  # and the model's own number kept
    ids = torch.randint(3, 120, (1, 9), generator=torch.Generator().manual_seed(1))
    rec = Recording(id_tokens(ids[0].tolist()), None, run_model(lm, input_ids=ids))
    attn, wo_out = reference(eager, lm, {"input_ids": ids})
    for (part, layer), want in attn.items():
        t = layer_trace(lm, rec, part, layer, Config())
        assert (t.pattern - want[0]).abs().max().item() <= TOL, (case, layer, "pattern")
        assert (t.output - wo_out[(part, layer)][0]).abs().max().item() <= TOL, (case, layer, "W^O output")

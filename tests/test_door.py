"""The door's parts the moved studies rely on and no study test checks alone (issue 36 §1): pipeline.gradients (the
attribution patching pass) against finite differences of a copy hooked at W^O, with the model untouched, and the
Variants view's converted pattern (variants.converted_patterns: pipeline.run with a conversion's ShareKV interventions)
against the model's own attention weights after the same conversion written as a weight edit."""

from __future__ import annotations

import copy

import pytest
import torch
from references import kv_pooled_copy

from conftest import tiny_model
from mha_viz import pipeline
from mha_viz.pipeline import Replace
from mha_viz.studies import variants as va
from mha_viz.trace import MhaVizError

TEXT = "The animal was tired because it ran"


@pytest.fixture(scope="module", params=["bert", "llama"])
def tiny(request):
    return tiny_model(request.param)


def _ids(lm) -> torch.Tensor:
    return torch.tensor([lm.tokenizer(TEXT)["input_ids"]])  # [1, pos]


def _measure(logits: torch.Tensor | None, hidden: torch.Tensor) -> torch.Tensor:
    """A scalar of the pass's output: the last position's outputs weighted by a fixed vector."""
    out = hidden if logits is None else logits  # [1, pos, width]
    w = torch.linspace(-1.0, 1.0, out.shape[-1], device=out.device)  # [width]
    return (out[0, -1] * w).sum()  # []


def test_gradients_equal_finite_differences_and_leave_the_model_untouched(tiny) -> None:
    part, ids = tiny.parts[0], _ids(tiny)
    before = {n: p.detach().clone() for n, p in tiny.model.named_parameters()}
    out = pipeline.run(tiny, ids, only=(part, 0)).calls[(part, 0)].wo_in  # [1, pos, h * dh]
    leaf = torch.zeros(1, ids.shape[1], tiny.n_heads, out.shape[-1] // tiny.n_heads, requires_grad=True)
    (grad,) = pipeline.gradients(tiny, ids, _measure, [leaf], Replace(part, 0, "out", leaf))
    assert grad.shape == leaf.shape and grad.abs().max() > 0
    assert all(p.grad is None for p in tiny.model.parameters())  # autograd asked for the leaf only
    assert all(torch.equal(p, before[n]) for n, p in tiny.model.named_parameters())
    direction = torch.randn(leaf.shape, generator=torch.Generator().manual_seed(0))
    eps = 1e-2
    model, shift = copy.deepcopy(tiny.model), {}  # the reference: W^O's input shifted by a pre-hook (no capture)
    wo = model.get_submodule(tiny.site(part, 0).wo)
    wo.register_forward_pre_hook(lambda _m, args: (args[0] + shift["by"].flatten(2), *args[1:]))

    def value(by: torch.Tensor) -> float:
        shift["by"] = by  # [1, pos, h, dh]
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True, **({"use_cache": False} if tiny.causal_lm else {}))
        return float(_measure(getattr(out, "logits", None), out.hidden_states[-1]))

    numeric = (value(eps * direction) - value(-eps * direction)) / (2 * eps)
    assert float((grad * direction).sum()) == pytest.approx(numeric, rel=2e-2, abs=1e-4)


def test_gradients_refuse_a_bad_intervention(tiny) -> None:
    leaf = torch.zeros(1, requires_grad=True)
    with pytest.raises(MhaVizError, match="cannot be replaced"):
        pipeline.gradients(tiny, _ids(tiny), _measure, [leaf], Replace(tiny.parts[0], 0, "x", leaf))


def test_converted_patterns_equal_the_edited_models_own_weights(tiny) -> None:
    """The Variants view's pattern with every layer pooled to one K/V head (MQA, through pipeline.run) equals the
    attention weights the weight-edited copy returns itself (output_attentions), and differs from the model's."""
    part, layer = tiny.parts[0], 1
    groups = va.consecutive_groups(tiny.n_kv_heads, 1)
    got = va.converted_patterns(tiny, TEXT, None, part, layer, "mean", (groups,) * tiny.n_layers(part))  # [h, q, k]
    model = kv_pooled_copy(tiny, part, groups)
    with torch.no_grad():
        want = model(input_ids=_ids(tiny), output_attentions=True).attentions[layer][0]  # [h, q, k]
    torch.testing.assert_close(torch.from_numpy(got), want.float(), atol=2e-5, rtol=1e-4)
    own = va.layer_patterns(tiny, TEXT, None, part, layer)  # no intervention: the model's own pattern
    assert abs(own - got).max() > 1e-3

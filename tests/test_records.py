"""Record interventions (issue 36 §1: the residual stream recorded per component, through the door): RecordSources
given to pipeline.run files each layer's input, W^O's output and the layer's submodules at the asked tokens, equal to
the model's own hidden states and a hook on W^O; the final residual of the logit lens (unembed.FinalResidual);
neither leaves a hook on the shared model, and a Record files only its own pass (watch.py)."""

from __future__ import annotations

import threading

import pytest
import torch
from references import reference

from conftest import SENTENCE
from mha_viz.models.unembed import FinalResidual, residual_stream, unembedding
from mha_viz.models.watch import watching
from mha_viz.pipeline import run
from mha_viz.pipeline.scores import RecordSources
from mha_viz.trace import MhaVizError

pytestmark = pytest.mark.model  # the bundled models (a parametrized fixture the tier rule does not follow)
POSITIONS = (1, 4, 7)


def _hooks(model: torch.nn.Module) -> int:
    """Every forward hook and pre-hook on the model's modules."""
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def _ids(lm) -> torch.Tensor:
    return torch.tensor([lm.tokenizer(SENTENCE)["input_ids"]])  # [1, pos]


@pytest.mark.parametrize("name", ["minilm", "smollm2"])
def test_sources_through_the_door_are_the_models_own_and_leave_no_hook(name: str, request) -> None:
    lm = request.getfixturevalue(name)
    part, layer, ids = lm.part(None), 2, _ids(lm)
    run(lm, ids)  # transformers installs its own output-capturing hooks at a model's first pass
    before = _hooks(lm.model)
    sources = RecordSources(part, layer, POSITIONS)
    ran = run(lm, ids, sources, only=(part, layer), extras=False)
    rec = ran.records[sources]
    assert _hooks(lm.model) == before  # the pass's hooks are gone
    _, wo_out = reference(lm.model, lm, {"input_ids": ids})  # [b, q, d] per (part, layer): a hook on W^O
    with torch.no_grad():
        hidden = lm.model(input_ids=ids, output_hidden_states=True).hidden_states  # L + 1 of [1, pos, d]
    at = list(POSITIONS)
    assert sorted(rec.h_in) == sorted(rec.o_out) == list(range(layer + 1))
    for lay in range(layer + 1):
        assert torch.allclose(rec.h_in[lay], hidden[lay][0, at].double(), atol=1e-6), lay  # the layer's input
        assert torch.allclose(rec.o_out[lay], wo_out[(part, lay)][0, at].double(), atol=1e-6), lay
        assert rec.subs[lay], lay  # the layer's norms and MLP, each (input, output) at the tokens
        assert all(y.shape == (len(at), lm.d_model) for _, y in rec.subs[lay].values())
    assert (rec.rope is not None) == (name == "smollm2")  # rotary angles of the chosen layer where the model has them


def test_a_record_files_only_its_own_pass(smollm2) -> None:
    """A pass another request makes while the hooks are on (another thread: another context) files nothing here."""
    lm, ids = smollm2, _ids(smollm2)
    u = unembedding(lm)
    step = FinalResidual(lm.part(None), lm.n_layers() - 1, u.norm_name)
    with watching(lm.model, lm, [step]) as kept, torch.no_grad():
        other = threading.Thread(target=lambda: lm.model(input_ids=ids))
        other.start()
        other.join()
        assert kept[step] == []  # the other request's pass
        lm.model(input_ids=ids)
        assert len(kept[step]) == 1 and kept[step][0].shape == (1, ids.shape[1], lm.d_model)  # this one's


def test_the_logit_lens_leaves_no_hook_on_the_shared_model(smollm2) -> None:
    """unembedding() finds the final norm and residual_stream reads its input for one pass: the cached model keeps
    no hook of either (before, the final norm kept a pre-hook for as long as the model lived). The dashboard's own
    stop check (ui/guard.py: a pre-hook on every module, set at load) may be there."""
    lm = smollm2
    norm = lm.model.get_submodule(unembedding(lm).norm_name)
    stream = residual_stream(lm, tuple(_ids(lm)[0].tolist()))
    hooks = [*norm._forward_pre_hooks.values(), *norm._forward_hooks.values()]
    assert [h for h in hooks if h.__module__.startswith("mha_viz.models")] == []
    with torch.no_grad():
        final = lm.model(input_ids=_ids(lm), output_hidden_states=True).hidden_states[-1][0]  # the norm's output
    assert not torch.allclose(stream.resid[-1], final)  # resid[-1] is what the norm reads, not what it gives


def test_sources_are_refused_in_words_without_positions(minilm) -> None:
    with pytest.raises(MhaVizError, match="token positions"):
        run(minilm, _ids(minilm), RecordSources("encoder", 0, ()))

"""The one door to a model run (issue 36 §1): ``run(lm, input_ids, *interventions, **options)``.

Studies ask for a pass with typed interventions (models/interventions.py: Ablate, Replace, ShareKV, Rotate,
HeadMask, Route, KeyMask), each keyed by (part, layer), instead of threading a keyword per experiment; a Record
(RecordSources, FinalResidual) reads the pass's modules instead, into ModelRun.records; ``gradients`` is the same
pass with autograd on (attribution patching)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from mha_viz.models.call import Call
from mha_viz.models.capture import Recorder, recording
from mha_viz.models.generate import Generated, greedy
from mha_viz.models.interventions import (
    Ablate,
    HeadMask,
    Intervention,
    KeyMask,
    Replace,
    Rotate,
    Route,
    ShareKV,
    plan_of,
)
from mha_viz.models.load import LoadedModel
from mha_viz.models.run import ModelRun, run_model

__all__ = ["Ablate", "HeadMask", "Intervention", "KeyMask", "Replace", "Rotate", "Route", "ShareKV", "plan_of"]
__all__ += ["Generated", "ModelRun", "generate", "gradients", "run"]
__all__ += ["Call"]  # what a run records of one attention call (ModelRun.calls)


def run(lm: LoadedModel, input_ids: torch.Tensor, *interventions: Intervention, **options: Any) -> ModelRun:
    """One forward pass of ``lm`` with ``interventions`` (applied at their (part, layer) in stage order, this pass
    only). ``options`` are run_model's: attention_mask, decoder_ids, position_ids, record, extras, only,
    tile_cells, progress. Shapes: input_ids [b, pos] long; see run_model for the rest."""
    return run_model(lm, input_ids, interventions=interventions, **options)


def generate(
    lm: LoadedModel, input_ids: torch.Tensor, steps: int, interventions: Sequence[Intervention] = ()
) -> Generated:
    """``steps`` greedy tokens after ``input_ids`` with ``interventions`` in every pass, and where each head looked
    when each token was chosen (models/generate.py; a long prompt runs in tiles). Shapes: input_ids [1, n] long."""
    return greedy(lm, input_ids, steps, interventions)


Measure = Callable[[torch.Tensor | None, torch.Tensor], torch.Tensor]


def gradients(
    lm: LoadedModel,
    input_ids: torch.Tensor,
    measure: Measure,
    wrt: Sequence[torch.Tensor],
    *interventions: Intervention,
) -> tuple[torch.Tensor, ...]:
    """∂ measure(logits, hidden) / ∂ each of ``wrt`` for one pass with ``interventions`` and autograd on, nothing
    recorded (``wrt``: tensors that require grad, put into the pass by the interventions, e.g. a zero Replace with
    ``where`` None). torch.autograd.grad asks for nothing else: no parameter gains a .grad, the model is untouched.
    Shapes: input_ids [b, pos] long; measure gets logits [b, pos, vocab] (None without an LM head) and the last hidden
    state [b, pos, d_model] and returns a scalar []; each gradient is shaped like its tensor in ``wrt``."""
    for step in interventions:
        step.check(lm)
    parts = lm.call_parts()
    rec = Recorder(parts=parts, keep=False, plan=plan_of(interventions))
    kwargs = {"use_cache": False} if lm.causal_lm else {}
    with torch.enable_grad(), recording(rec):
        out = lm.model(input_ids=input_ids.to(lm.device), output_hidden_states=True, **kwargs)
        value = measure(getattr(out, "logits", None), out.hidden_states[-1])  # []
        return torch.autograd.grad(value, list(wrt))

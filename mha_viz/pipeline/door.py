"""The one door to a model run (issue 36 §1): ``run(lm, input_ids, *interventions, **options)``.

Studies ask for a pass with typed interventions (models/interventions.py: Ablate, Replace, ShareKV, Rotate,
HeadMask, Route, KeyMask), each keyed by (part, layer), instead of threading a keyword per experiment."""

from __future__ import annotations

from typing import Any

import torch

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

__all__ = ["Ablate", "HeadMask", "Intervention", "KeyMask", "Replace", "Rotate", "Route", "ShareKV", "plan_of", "run"]


def run(lm: LoadedModel, input_ids: torch.Tensor, *interventions: Intervention, **options: Any) -> ModelRun:
    """One forward pass of ``lm`` with ``interventions`` (applied at their (part, layer) in stage order, this pass
    only). ``options`` are run_model's: attention_mask, decoder_ids, position_ids, record, extras, only,
    tile_cells, progress. Shapes: input_ids [b, pos] long; see run_model for the rest."""
    return run_model(lm, input_ids, interventions=interventions, **options)

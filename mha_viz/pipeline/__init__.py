"""The road: (model, text, settings) -> a recording of every attention call -> one layer's AttentionTrace.

door.py is the one way to run a model with interventions (``run(lm, ids, Ablate(...), ...)``);
road.py records and computes every pattern the app shows (the one engine for a layer); what_ifs.py the edits
of a layer's weights and W^O; own_road.py own weights' one layer; rows.py the same patterns for long texts a few
query rows at a time; batch.py several texts per forward; budget.py and admission.py what a request may cost.
Imports models/ and the engine below it, nothing above."""

import importlib
from pathlib import Path
from typing import Any

_SUBMODULES = {p.stem for p in Path(__file__).parent.glob("*.py")}


_ROAD = ("mha_viz.pipeline.door", "mha_viz.pipeline.road", "mha_viz.pipeline.own_road", "mha_viz.pipeline.what_ifs")


def __getattr__(name: str) -> Any:
    """`from mha_viz.pipeline import traces` (the documented import; own_trace, edit_weights likewise) reads the road,
    loaded on first use: the budget and admission modules stay importable without torch."""
    if name.startswith("_") or name in _SUBMODULES:
        raise AttributeError(f"module 'mha_viz.pipeline' has no attribute {name!r}")
    for module in _ROAD:
        found = getattr(importlib.import_module(module), name, _ROAD)
        if found is not _ROAD:
            return found
    raise AttributeError(f"module 'mha_viz.pipeline' has no attribute {name!r}")

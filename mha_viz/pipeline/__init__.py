"""The road: (model, text, settings) -> a recording of every attention call -> one layer's AttentionTrace.

road.py records and computes every pattern the app shows (the one engine for a layer); rows.py the same for
long texts a few query rows at a time; batch.py several texts per forward; budget.py and admission.py what a
request may cost. Imports models/ and the engine below it, nothing above."""

import importlib
from pathlib import Path
from typing import Any

_SUBMODULES = {p.stem for p in Path(__file__).parent.glob("*.py")}


def __getattr__(name: str) -> Any:
    """`from mha_viz.pipeline import traces` (the documented import) reads the road, loaded on first use: the
    budget and admission modules stay importable without torch."""
    if name.startswith("_") or name in _SUBMODULES:
        raise AttributeError(f"module 'mha_viz.pipeline' has no attribute {name!r}")
    road = importlib.import_module("mha_viz.pipeline.road")
    try:
        return getattr(road, name)
    except AttributeError:
        raise AttributeError(f"module 'mha_viz.pipeline' has no attribute {name!r}") from None

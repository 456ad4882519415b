"""Module hooks for one pass (issue 36 §1): what a Record intervention (interventions.Record: a layer's input, its
norms and MLP, W^O, the final norm's input) reads of the model beyond its attention calls.

watching() registers each Record's hooks on the shared model for the block and removes them afterwards. A hook
fires only in the context that registered it (a ContextVar): another request running through the same model at the
same time never files into this recording, nor this one into its. No hook outlives the block, so the cached model
is left as it was loaded."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

from mha_viz.models.interventions import Hook, Record

_OWNER: ContextVar[object | None] = ContextVar("mha_viz_watch", default=None)


@contextmanager
def watching(model: torch.nn.Module, lm: Any, records: Sequence[Record]) -> Iterator[dict[Record, Any]]:
    """Each of ``records``' hooks on ``model`` (``lm``'s) for the passes made inside the block, in this context only;
    yields {record: what it fills} (Record.begin's store). Nothing is registered when ``records`` is empty."""
    if not records:
        yield {}
        return
    owner = object()
    filled: dict[Record, Any] = {}
    handles = []
    try:
        for record in records:
            store, hooks = record.begin(lm)
            filled[record] = store
            handles.extend(_register(model.get_submodule(h.module), h, owner) for h in hooks)
        token = _OWNER.set(owner)
        try:
            yield filled
        finally:
            _OWNER.reset(token)
    finally:
        for handle in handles:
            handle.remove()


def _register(module: torch.nn.Module, hook: Hook, owner: object) -> Any:
    fn: Callable = hook.fn
    if hook.kind == "pre":  # fn(module, args, kwargs): before the module runs

        def pre(m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            if _OWNER.get() is owner:
                fn(m, args, kwargs)

        return module.register_forward_pre_hook(pre, with_kwargs=True)

    def post(m: torch.nn.Module, args: tuple, out: object) -> None:  # fn(module, args, output): after it ran
        if _OWNER.get() is owner:
            fn(m, args, out)

    return module.register_forward_hook(post)

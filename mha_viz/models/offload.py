"""A model spread by accelerate (device_map) with some layers offloaded to the CPU or disk: their weights live off
the module (on the "meta" device) and are put in place only for the length of that module's forward pass.

Two things follow, both handled here at load time, before the model is shared:
- reading a weight outside a forward pass (W^O for a trace, the LM head's rows, the embeddings): ``tensor`` gives
  the real values from accelerate's weights map (the CPU copy, or the safetensors file on disk), read-only,
  without putting anything on the module;
- two requests running one offloaded module at once would race (one pass's post-forward hook takes the weights
  off while the other is still using them): ``serialize`` makes each offloaded module's forward hold one lock, so
  the rest of the model still runs concurrently.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from weakref import WeakKeyDictionary

import torch

from mha_viz.trace import MhaVizError

# module -> (accelerate's weights map of the module whose hook places it, that module's name prefix for this one)
_WEIGHTS: WeakKeyDictionary[torch.nn.Module, tuple[Mapping, str]] = WeakKeyDictionary()


def _hooks(module: torch.nn.Module) -> Iterator[object]:
    hook = getattr(module, "_hf_hook", None)
    if hook is None:
        return
    yield from getattr(hook, "hooks", (hook,))  # a SequentialHook holds several


def offloading_hooks(module: torch.nn.Module) -> list[object]:
    """The accelerate hooks on ``module`` that keep its weights (and its submodules') off the module."""
    return [h for h in _hooks(module) if getattr(h, "offload", False) and getattr(h, "weights_map", None) is not None]


def index(model: torch.nn.Module) -> int:
    """Note where every offloaded module's weights are (for ``tensor``); returns how many modules hold offloaded
    weights (0: nothing is offloaded)."""
    n = 0
    for _, module in model.named_modules():
        for hook in offloading_hooks(module):
            for sub_name, sub in module.named_modules():
                _WEIGHTS[sub] = (hook.weights_map, f"{sub_name}." if sub_name else "")
                n += 1
    return n


def tensor(module: torch.nn.Module, name: str = "weight") -> torch.Tensor | None:
    """``module.<name>`` with its real values: the parameter itself, or for an offloaded module its values from
    accelerate's weights map (read-only; nothing is put on the module). None when the module has no such tensor."""
    t = getattr(module, name, None)
    if t is None or t.device.type != "meta":
        return t
    found = _WEIGHTS.get(module)
    if found is None:
        raise MhaVizError(f"a weight of {type(module).__name__} is offloaded and could not be read back")
    weights, prefix = found
    return weights[prefix + name]


def serialize(model: torch.nn.Module) -> int:
    """Make the forward of every module with an offloading hook hold one lock (shared by all of them); returns
    how many modules were wrapped."""
    lock = threading.RLock()
    n = 0
    for _, module in model.named_modules():
        if not offloading_hooks(module):
            continue
        inner = module.forward  # accelerate's forward: put the weights in place, run, take them off

        def locked(*args: object, _inner=inner, **kwargs: object) -> object:
            with lock:
                return _inner(*args, **kwargs)

        module.forward = locked
        n += 1
    return n


def input_device(model: torch.nn.Module) -> torch.device:
    """Where a pass's inputs go: the first parameter that is not offloaded (accelerate's hooks move inputs on to
    each module's own device), the CPU when every parameter is."""
    return next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))


def linear_in_out(module: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A linear map's weight as [in, out] and its bias [out], copied to float32 on the CPU (an offloaded layer's
    from where accelerate keeps it: models/offload.py)."""
    w = tensor(module, "weight").detach().float().cpu()
    w = w if type(module).__name__ == "Conv1D" else w.T  # nn.Linear stores [out, in]
    b = tensor(module, "bias")
    return w.contiguous().clone(), None if b is None else b.detach().float().cpu().clone()

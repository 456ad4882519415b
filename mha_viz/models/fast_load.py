"""A fast load of a local safetensors checkpoint that matches its model class exactly (issue 36 §6).

transformers' ``from_pretrained`` finds, renames, converts, casts, shards and reports weights for every kind of
checkpoint; for the bundled models none of that does anything, yet it costs CPU seconds at the server's start.
Here the model class is built from its config with the initialisation skipped (transformers' no_init_weights: the
parameters are left empty, the buffers computed by the modules' own constructors), and the checkpoint's tensors are
assigned as they are (``load_state_dict(assign=True)``) — only when every tensor's name, shape and dtype is exactly
the model's own, the only absent ones are tied weights whose source is present, and the model type is one whose
result is tested bit-identical to from_pretrained's (tests/test_fast_load.py). In every other case fast_load
returns None and the caller uses from_pretrained unchanged. Never remote code; safetensors only.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import torch

WEIGHTS = "model.safetensors"
# model types whose fast load is tested bit-identical to from_pretrained's: MiniLM (bert), SmolLM2 (llama)
FAST_TYPES = frozenset({"bert", "llama"})
# files that make from_pretrained do more than read one safetensors file: shards, PEFT adapters, other formats
_OTHER_FILES = ("model.safetensors.index.json", "adapter_config.json", "adapter_model.safetensors")
_log = logging.getLogger(__name__)


def model_class(config: object, autos: list) -> type | None:
    """The class the first of ``autos`` (transformers' auto classes, tried in order) maps ``config`` to, if any."""
    for auto in autos:
        mapping = getattr(auto, "_model_mapping", None)
        if mapping is not None and type(config) in mapping:
            return mapping[type(config)]
    return None


def eligible(folder: str | Path, config: object) -> bool:
    """Whether ``folder`` holds one safetensors file and nothing else from_pretrained would read or convert."""
    path = Path(folder)
    return (
        str(getattr(config, "model_type", "")) in FAST_TYPES
        and (path / WEIGHTS).is_file()
        and not any((path / name).exists() for name in _OTHER_FILES)
        and getattr(config, "quantization_config", None) is None
        and not getattr(type(config), "extra_files", ())  # files from_pretrained would add (transformers 5)
    )


def _buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's buffers that are not in its state dict (non-persistent), by their full name."""
    return {
        f"{prefix}{'.' if prefix else ''}{name}": buf
        for prefix, module in model.named_modules()
        for name, buf in module._buffers.items()
        if buf is not None and name in module._non_persistent_buffers_set
    }


def redundant(state: dict[str, torch.Tensor], model: torch.nn.Module) -> set[str]:
    """Names in ``state`` that are the model's non-persistent buffers with the very same value (an old
    checkpoint's ``position_ids``): from_pretrained drops them, and so may we, the model's own being equal."""
    own = _buffers(model)
    return {
        name
        for name, tensor in state.items()
        if name in own and own[name].dtype == tensor.dtype and torch.equal(own[name], tensor)
    }


def mismatch(state: dict[str, torch.Tensor], model: torch.nn.Module) -> str | None:
    """Why ``state`` (a checkpoint's tensors, less its redundant ones) can't be assigned to ``model`` as it is,
    or None when it can: a name the model lacks, a name the checkpoint lacks (other than a tied weight whose
    source it has), or a shape or dtype that differs."""
    expected = model.state_dict()  # name -> tensor (parameters and persistent buffers; tied ones under both names)
    tied = dict(getattr(model, "all_tied_weights_keys", None) or {})  # target -> source
    unexpected = sorted(state.keys() - expected.keys())
    if unexpected:
        return f"not in the model: {unexpected[:3]}"
    for name in sorted(expected.keys() - state.keys()):
        if name not in tied or tied[name] not in state:
            return f"not in the checkpoint: {name}"
    for target, source in tied.items():
        if target in state and source in state:
            return f"both tied weights in the checkpoint: {target}, {source}"
    for name, tensor in state.items():
        want = expected[name]
        if tuple(tensor.shape) != tuple(want.shape) or tensor.dtype != want.dtype:
            return f"{name}: {tuple(tensor.shape)} {tensor.dtype} in the checkpoint, {tuple(want.shape)} {want.dtype}"
    return None


def fast_load(folder: str | Path, config: object, autos: list, attn_implementation: str) -> torch.nn.Module | None:
    """The model of a local checkpoint folder, as from_pretrained(folder, attn_implementation=...,
    dtype=float32, use_safetensors=True, local_files_only=True, trust_remote_code=False) gives it, in eval mode;
    None (nothing loaded) when the checkpoint does not match the model class exactly (see the module's text) or
    cannot be read: from_pretrained then loads it, or says what is wrong with it."""
    if not eligible(folder, config):
        return None
    cls = model_class(config, autos)
    if cls is None:
        return None
    try:
        return _load(Path(folder), config, cls, attn_implementation)
    except Exception as exc:  # an unreadable file, a class that can't be built this way: from_pretrained's path
        _log.info("fast load of %s not taken (%s: %s); from_pretrained instead", folder, type(exc).__name__, exc)
        return None


def _load(folder: Path, config: object, cls: type, attn_implementation: str) -> torch.nn.Module | None:
    from safetensors.torch import load_file
    from transformers import initialization

    state = load_file(folder / WEIGHTS)  # name -> tensor, as stored
    config = copy.deepcopy(config)  # from_pretrained does not change the caller's config either
    config.name_or_path = str(folder)
    with initialization.no_init_weights():  # empty parameters: every one is assigned or tied below
        model = cls._from_config(config, attn_implementation=attn_implementation, dtype=torch.float32)
    for name in redundant(state, model):
        del state[name]
    why = mismatch(state, model)
    if why is not None:
        _log.info("fast load of %s not taken (%s); from_pretrained instead", folder, why)
        return None
    missing = model.load_state_dict(state, strict=False, assign=True).missing_keys  # only tied targets (mismatch)
    if missing:
        model.tie_weights(missing_keys=set(missing), recompute_mapping=False)
        if any(model.get_parameter(t) is not model.get_parameter(model.all_tied_weights_keys[t]) for t in missing):
            return None  # not tied as from_pretrained ties them: its path, not ours
    model.eval()
    if model.can_generate():  # its generation_config.json, as from_pretrained reads it
        model.adjust_generation_fn(
            None, True, False, str(folder), cache_dir=None, force_download=False, proxies=None,
            local_files_only=True, token=None, revision="main", subfolder="", trust_remote_code=False,
        )  # fmt: skip
    return model

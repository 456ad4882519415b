"""Load a model for tracing: our recording attention implementation, never remote code, safetensors only.

The loaded model is shared read-only by every user. At load time (before it is shared) it gets the
recording attention implementation and two kinds of hooks that do nothing unless a request's Recorder is
active in the calling thread: a pre-hook on each attention module (its input X) and a hook on each W^O
(its output). Nothing per-request is ever stored on the model.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass

import torch

from mha_viz.config import DEFAULT_MODEL, PART_NAMES, hosted
from mha_viz.models import capture, hooks, offload
from mha_viz.models.arch import Site, discover
from mha_viz.models.catalog import OUTSIDE_INTERFACE, refusal
from mha_viz.models.fast_load import fast_load
from mha_viz.models.moa import routing_hook
from mha_viz.models.placement import Placement, split
from mha_viz.models.sources import SUPPORTED_TEXT, hub_reachable, reason, resolve
from mha_viz.runtime.gcpause import gc_paused
from mha_viz.trace import MhaVizError


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A pretrained model ready to trace. Shared read-only by every user: never mutate it."""

    name: str
    model_type: str
    model: torch.nn.Module
    tokenizer: object
    sites: tuple[Site, ...]
    n_heads: int
    n_kv_heads: int
    d_model: int
    max_tokens: int
    encoder_decoder: bool
    decoder_start_id: int | None
    causal_lm: bool  # has an LM head: next-token probabilities

    @property
    def device(self) -> torch.device:
        """Where inputs go (a model spread over devices: its first resident parameter's; accelerate's hooks move
        them on)."""
        return offload.input_device(self.model)

    @property
    def device_map(self) -> dict[str, str] | None:
        """Where each block went ({module: "0" | "cpu" | "disk"}) for a model spread by a device map, else None."""
        found = getattr(self.model, "hf_device_map", None)
        return {str(k): str(v) for k, v in found.items()} if found else None

    @functools.cached_property  # asked for at every layer of every trace; the sites never change
    def parts(self) -> tuple[str, ...]:
        """The attention kinds this model has, in model order (e.g. ("encoder", "decoder", "cross"))."""
        return tuple(dict.fromkeys(s.part for s in self.sites))

    @property
    def causal(self) -> bool:
        """The model's main stack is causal (a decoder-only model)."""
        return not self.encoder_decoder and any(s.causal for s in self.sites)

    def part(self, part: str | None) -> str:
        """``part`` checked against this model (None: its first part)."""
        if part is None:
            return self.parts[0]
        if part not in self.parts:
            raise MhaVizError(
                f"{self.name} has no {PART_NAMES.get(part, part)}; choose one of: {', '.join(self.parts)}"
            )
        return part

    def n_layers(self, part: str | None = None) -> int:
        p = self.part(part)
        return sum(1 for s in self.sites if s.part == p)

    def site(self, part: str | None, layer: int) -> Site:
        p = self.part(part)
        n = self.n_layers(p)
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n:
            raise MhaVizError(f"layer {layer} does not exist; {self.name} has layers 0 to {n - 1}")
        return next(s for s in self.sites if s.part == p and s.layer == layer)

    def call_parts(self) -> dict[int, str]:
        """id of each attention module -> its part: how the capture (Recorder.parts) tells one call from another."""
        return {id(self.model.get_submodule(s.name)): s.part for s in self.sites}


def model_classes(model_type: str, encoder_decoder: bool) -> list:
    """The auto classes to try, most useful first: a head that gives next-token probabilities if any."""
    import transformers
    from transformers.models.auto import modeling_auto as ma

    if encoder_decoder:
        return [transformers.AutoModelForSeq2SeqLM, transformers.AutoModel]
    if model_type in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return [transformers.AutoModelForCausalLM, transformers.AutoModel]
    return [transformers.AutoModel]


def load_model(name: str | None = None, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a supported model (the bundled MiniLM by default) in eval mode, on ``device``; a device string with a
    placement ("<device>|<placement>", models/placement.py) spreads the model with transformers' device_map
    instead (GPUs, CPU, disk, through accelerate).

    Raises MhaVizError naming what is supported when the model can't be had or isn't supported.
    """
    with gc_paused():  # transformers' modeling code and the weights: no full collections meanwhile (~0.7 s)
        return _load_model(name, device)


def _load_model(name: str | None, device: str | torch.device) -> LoadedModel:
    device, placement = split(str(device))
    spread = _spread_kwargs(placement)  # checked before anything loads
    import transformers  # deferred: importing transformers costs seconds

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    capture.register()

    src, bundled = resolve(name)
    shown = DEFAULT_MODEL if bundled else name
    local = bundled or os.path.isdir(src) or not hub_reachable()
    offline = {"local_files_only": True} if local else {}
    try:
        config = transformers.AutoConfig.from_pretrained(src, trust_remote_code=False, **offline)
    except Exception as exc:  # OSError (unknown id, no network), ValueError (unknown/remote code)
        why = (
            "no network, and it is not in the local cache"
            if offline and not bundled and not os.path.isdir(src)
            else reason(exc)
        )
        raise MhaVizError(f"could not load model {shown!r} ({why}); {SUPPORTED_TEXT}") from None
    model_type = str(config.model_type)
    why_not = refusal(model_type)  # the catalog's own rule: the last coverage run (scripts/coverage.py) did not
    if why_not == OUTSIDE_INTERFACE:  # reproduce this type, or did not try it
        raise MhaVizError(
            f"model {shown!r} is a {model_type!r} model, whose attention does not go through transformers' "
            f"attention interface, so mha-viz cannot record it exactly; {SUPPORTED_TEXT}"
        )
    if why_not is not None:
        raise MhaVizError(
            f"model {shown!r} is a {model_type!r} model, which is not supported: the test suite does not reproduce "
            f"it ({why_not}); {SUPPORTED_TEXT}"
        )
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(src, trust_remote_code=False, **offline)
    except Exception as exc:
        raise MhaVizError(f"could not load the tokenizer of {shown!r} ({reason(exc)})") from None
    autos = model_classes(model_type, encoder_decoder)
    model = None if spread or not os.path.isdir(src) else fast_load(src, config, autos, capture.NAME)
    for auto in autos if model is None else ():  # from_pretrained: every checkpoint fast_load does not take
        try:
            model = auto.from_pretrained(
                src, attn_implementation=capture.NAME, use_safetensors=True, trust_remote_code=False,
                dtype=torch.float32, **offline, **spread,
            )  # fmt: skip
            break
        except ValueError as exc:  # no such head for this config: try the next class
            last = exc
        except Exception as exc:
            raise MhaVizError(
                f"could not load model {shown!r} ({reason(exc)}); weights must be in safetensors format; "
                f"{SUPPORTED_TEXT}"
            ) from None
    if model is None:
        raise MhaVizError(f"could not load model {shown!r} ({reason(last)}); {SUPPORTED_TEXT}")
    return prepare(model, tokenizer, shown, device)


def _spread_kwargs(placement: Placement | None) -> dict:
    """from_pretrained's device_map, max_memory, offload_folder for a placement (none without one)."""
    if placement is None:
        return {}
    if placement.offload_folder and hosted():
        raise MhaVizError("this server does not take an offload folder; spread the model without one")
    try:
        import accelerate  # noqa: F401 (transformers' device_map needs it)
    except ImportError:
        raise MhaVizError("a device map needs accelerate: pip install accelerate") from None
    logging.getLogger("accelerate").setLevel(logging.ERROR)  # not "some parameters are on the meta device" each load
    return placement.kwargs()


def prepare(model: torch.nn.Module, tokenizer: object, name: str, device: str | torch.device = "cpu") -> LoadedModel:
    """Make a transformers model traceable: eval mode, our attention implementation, the probe, the hooks.

    Called once per model, before it is shared.
    """
    capture.register()
    config = model.config
    model.eval().requires_grad_(False)
    model.set_attn_implementation(capture.NAME)
    spread = bool(getattr(model, "hf_device_map", None))
    if not spread:  # a model spread by a device map stays where accelerate put its layers
        model.to(device)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    start = _decoder_start(config) if encoder_decoder else None
    vocab = int(getattr(config, "vocab_size", 0) or getattr(config.get_text_config(), "vocab_size", 0) or 100)
    probe = torch.arange(1, 5, device=offload.input_device(model)).remainder(vocab).unsqueeze(0)  # [1, 4]
    inputs = {"input_ids": probe, "use_cache": False} if _accepts_cache(model) else {"input_ids": probe}
    if encoder_decoder:
        inputs["decoder_input_ids"] = probe[:, :3]
    try:
        sites = discover(model, inputs, encoder_decoder)
    except MhaVizError:
        raise
    except Exception as exc:
        raise MhaVizError(f"{name} could not run on a short probe text ({reason(exc)}); it is not supported") from None
    if encoder_decoder and not any(s.part == "encoder" for s in sites):
        raise MhaVizError(
            f"{name}'s encoder attention does not go through transformers' attention interface (its own local, "
            "global or block-sparse attention: LongT5, BigBird-Pegasus, Pegasus-X); it is not supported"
        )
    for site in sites:
        attn = model.get_submodule(site.name)
        attn.register_forward_pre_hook(hooks.input_hook, with_kwargs=True)
        model.get_submodule(site.wo).register_forward_hook(hooks.output_hook(attn, site.pre_wo))
        for which, proj in zip("qk", site.pre_rotary, strict=False):
            model.get_submodule(proj).register_forward_hook(hooks.projection_hook(attn, which))
        if site.moa:  # a mixture of attention heads: the routing the model used, from its router
            router = model.get_submodule(site.moa).router
            router.register_forward_hook(routing_hook(attn, int(router.top_k)))
        up, down, d_rope = site.latent
        if up:  # latent attention: c_KV (W_UKV's input) and the rotary key part before rotation
            model.get_submodule(up).register_forward_hook(hooks.latent_hook(attn, "c_kv"))
            if down:
                model.get_submodule(down).register_forward_hook(hooks.latent_hook(attn, "k_rope", d_rope))
    if spread and offload.index(model):  # weights off their modules: readable, and one pass at a time per module
        offload.serialize(model)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_heads = int(getattr(text, "num_attention_heads", None) or getattr(text, "n_head", None) or 1)
    return LoadedModel(
        name=name,
        model_type=str(config.model_type),
        model=model,
        tokenizer=tokenizer,
        sites=sites,
        n_heads=n_heads,
        n_kv_heads=int(getattr(text, "num_key_value_heads", None) or n_heads),
        d_model=int(getattr(text, "hidden_size", None) or getattr(text, "d_model", None) or 0),
        max_tokens=_max_tokens(text, tokenizer),
        encoder_decoder=encoder_decoder,
        decoder_start_id=start,
        causal_lm=hasattr(model, "get_output_embeddings") and model.get_output_embeddings() is not None,
    )


def _accepts_cache(model: torch.nn.Module) -> bool:
    import inspect

    return "use_cache" in inspect.signature(model.forward).parameters


def _decoder_start(config: object) -> int:
    for attr in ("decoder_start_token_id", "pad_token_id", "bos_token_id"):
        value = getattr(config, attr, None)
        if value is not None:
            return int(value)
    return 0


def _max_tokens(config: object, tokenizer: object) -> int:
    for attr in ("max_position_embeddings", "n_positions", "max_source_positions"):
        value = getattr(config, attr, None)
        if value:
            limit = int(value)
            if config.model_type in ("roberta", "xlm-roberta", "camembert"):
                limit -= int(getattr(config, "pad_token_id", 1) or 1) + 1  # positions start after padding_idx
            return limit
    tok_limit = int(getattr(tokenizer, "model_max_length", 0) or 0)
    return tok_limit if 0 < tok_limit < 1_000_000 else 512  # relative positions (T5): no hard limit

"""Record, in one forward pass, what a score split (score_sources.py) needs, at a few tokens only: each layer's input
up to the chosen layer, every submodule's input and output inside those layers (the norms, the MLP, W^O), W^O's
input (the heads side by side) and the rotary angles the chosen layer used. Never every source at every token.

The hooks live for one pass only and file only into the recording that registered them (a ContextVar: another
request running through the same shared model at the same time never files into it, nor this one into its)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from mha_viz.models.load import LoadedModel
from mha_viz.trace import MhaVizError

_ACTIVE: ContextVar[SourceRecord | None] = ContextVar("mha_viz_source_record", default=None)
_INDEX = re.compile(r"\.\d+(?=\.|$)")


@dataclass(eq=False)
class SourceRecord:
    """What one pass recorded at ``positions`` (float64, CPU). Shapes: h_in[l] [t, d] (layer l's input);
    x[l] [t, d] (its attention module's input); o_in[l] [t, h*dh]; o_out[l] [t, d]; subs[l] {name: (input or
    None, output)} each [t, d]; rope (cos, sin) each [1, t, rot] or None."""

    positions: tuple[int, ...]
    layers: tuple[str, ...]  # the layer module of each layer of the part, by layer number
    h_in: dict[int, torch.Tensor] = field(default_factory=dict)
    x: dict[int, torch.Tensor] = field(default_factory=dict)
    o_in: dict[int, torch.Tensor] = field(default_factory=dict)
    o_out: dict[int, torch.Tensor] = field(default_factory=dict)
    subs: dict[int, dict[str, tuple[torch.Tensor | None, torch.Tensor]]] = field(default_factory=dict)
    rope: tuple[torch.Tensor, torch.Tensor] | None = None


def layer_modules(lm: LoadedModel, part: str) -> tuple[str, ...]:
    """The module of each layer of ``part`` (the outermost numbered module above its attention module: BERT's
    encoder.layer.3, T5's encoder.block.3, LLaMA's model.layers.3), checked to be one per layer, distinct."""
    names = []
    for site in sorted((s for s in lm.sites if s.part == part), key=lambda s: s.layer):
        m = _INDEX.search(site.name)
        if m is None:
            raise MhaVizError(f"{site.name} is not inside a numbered layer; the score split needs one")
        names.append(site.name[: m.end()])
    if len(set(names)) != len(names):
        raise MhaVizError("several attention layers share one layer module; the score split does not cover this")
    return tuple(names)


def _first(value: object) -> torch.Tensor | None:
    if isinstance(value, (tuple, list)) and value:
        value = value[0]
    return value if isinstance(value, torch.Tensor) else None


def _at(t: torch.Tensor | None, index: torch.Tensor, d: int) -> torch.Tensor | None:
    """Item 0 at the tracked positions, [t, d] float64, or None when ``t`` is not [b, pos, d]."""
    if t is None or t.dim() != 3 or t.shape[-1] != d or t.shape[1] <= int(index.max()):
        return None
    return t[0].index_select(0, index.to(t.device)).detach().to(device="cpu", dtype=torch.float64)


@contextmanager
def recording_sources(lm: LoadedModel, part: str, layer: int, positions: tuple[int, ...]) -> Iterator[SourceRecord]:
    """Hooks on layers 0..``layer`` of ``part`` that fill the SourceRecord yielded, for the passes made inside the
    block (one is meant), removed afterwards."""
    rec = SourceRecord(tuple(positions), layer_modules(lm, part))
    model, d = lm.model, lm.d_model
    index = torch.tensor(positions, dtype=torch.long)
    handles = []

    def mine() -> bool:
        return _ACTIVE.get() is rec

    def on_layer(lay: int):
        def pre(_m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            if mine():
                h = _at(args[0] if args else kwargs.get("hidden_states"), index, d)
                if h is not None:
                    rec.h_in[lay] = h

        return pre

    def on_attention(lay: int):
        def pre(_m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            if not mine():
                return
            x = _at(args[0] if args else kwargs.get("hidden_states"), index, d)
            if x is not None:
                rec.x[lay] = x
            pe = kwargs.get("position_embeddings")
            if lay == layer and isinstance(pe, tuple) and len(pe) == 2 and all(isinstance(t, torch.Tensor) for t in pe):
                rec.rope = tuple(t[:, index.to(t.device)].detach().cpu().double() for t in pe)  # [1, t, rot] each

        return pre

    def on_wo(lay: int):
        def hook(_m: torch.nn.Module, args: tuple, out: object) -> None:
            if mine() and args and isinstance(args[0], torch.Tensor) and isinstance(_first(out), torch.Tensor):
                a = args[0]
                rec.o_in[lay] = a[0].index_select(0, index.to(a.device)).detach().cpu().double()
                rec.o_out[lay] = _at(_first(out), index, d)

        return hook

    def on_sub(lay: int, name: str):
        def hook(_m: torch.nn.Module, args: tuple, out: object) -> None:
            y = _at(_first(out), index, d) if mine() else None
            if y is not None:
                rec.subs.setdefault(lay, {})[name] = (_at(args[0] if args else None, index, d), y)

        return hook

    try:
        for lay in range(layer + 1):
            site = lm.site(part, lay)
            if site.moa:
                raise MhaVizError("a mixture of attention heads picks W^O per token; the score split does not cover it")
            top = model.get_submodule(rec.layers[lay])
            handles.append(top.register_forward_pre_hook(on_layer(lay), with_kwargs=True))
            handles.append(
                model.get_submodule(site.name).register_forward_pre_hook(on_attention(lay), with_kwargs=True)
            )
            handles.append(model.get_submodule(site.wo).register_forward_hook(on_wo(lay)))
            inside = site.name + "."
            for name, mod in top.named_modules():
                full = f"{rec.layers[lay]}.{name}" if name else rec.layers[lay]
                if name and not full.startswith(inside) and full != site.name:
                    handles.append(mod.register_forward_hook(on_sub(lay, full)))
        token = _ACTIVE.set(rec)
        try:
            yield rec
        finally:
            _ACTIVE.reset(token)
    finally:
        for h in handles:
            h.remove()

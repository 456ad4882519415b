"""Record, in one forward pass, what a score split (score_sources.py) needs, at a few tokens only: each layer's input
up to the chosen layer, every submodule's input and output inside those layers (the norms, the MLP, W^O), W^O's
input (the heads side by side) and the rotary angles the chosen layer used. Never every source at every token.

RecordSources is a Record intervention: given to the pass (pipeline.run), its hooks live for that pass only and
file only into its own recording (watch.py: another request running through the same shared model at the same time
never files into it, nor this one into its)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from mha_viz.models.interventions import Hook, Record
from mha_viz.models.load import LoadedModel
from mha_viz.trace import MhaVizError

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


@dataclass(frozen=True, eq=False)
class RecordSources(Record):
    """The residual stream per component at ``positions`` for a score split of (part, layer): hooks on layers
    0..layer of ``part`` (each layer's input, its attention module's input and the rotary angles the chosen layer
    used, W^O's input and output, every other submodule's input and output) that fill a SourceRecord
    (ModelRun.records[self]) in the pass they are given to."""

    positions: tuple[int, ...] = ()

    def check(self, lm: LoadedModel) -> None:
        super().check(lm)
        if not self.positions or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in self.positions):
            raise MhaVizError("the score split records at one or more token positions (whole numbers from 0)")
        for lay in range(self.layer + 1):
            if lm.site(self.part, lay).moa:
                raise MhaVizError("a mixture of attention heads picks W^O per token; the score split does not cover it")

    def begin(self, lm: LoadedModel) -> tuple[SourceRecord, tuple[Hook, ...]]:
        rec = SourceRecord(tuple(self.positions), layer_modules(lm, self.part))
        part, layer, d = self.part, self.layer, lm.d_model
        index = torch.tensor(self.positions, dtype=torch.long)

        def on_layer(lay: int):
            def pre(_m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
                h = _at(args[0] if args else kwargs.get("hidden_states"), index, d)
                if h is not None:
                    rec.h_in[lay] = h

            return pre

        def on_attention(lay: int):
            def pre(_m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
                x = _at(args[0] if args else kwargs.get("hidden_states"), index, d)
                if x is not None:
                    rec.x[lay] = x
                pe = kwargs.get("position_embeddings")
                rope = isinstance(pe, tuple) and len(pe) == 2 and all(isinstance(t, torch.Tensor) for t in pe)
                if lay == layer and rope:
                    rec.rope = tuple(t[:, index.to(t.device)].detach().cpu().double() for t in pe)  # [1, t, rot] each

            return pre

        def on_wo(lay: int):
            def hook(_m: torch.nn.Module, args: tuple, out: object) -> None:
                if args and isinstance(args[0], torch.Tensor) and isinstance(_first(out), torch.Tensor):
                    a = args[0]
                    rec.o_in[lay] = a[0].index_select(0, index.to(a.device)).detach().cpu().double()
                    rec.o_out[lay] = _at(_first(out), index, d)

            return hook

        def on_sub(lay: int, name: str):
            def hook(_m: torch.nn.Module, args: tuple, out: object) -> None:
                y = _at(_first(out), index, d)
                if y is not None:
                    rec.subs.setdefault(lay, {})[name] = (_at(args[0] if args else None, index, d), y)

            return hook

        hooks = []
        for lay in range(layer + 1):
            site = lm.site(part, lay)
            top = rec.layers[lay]
            hooks += [Hook(top, "pre", on_layer(lay)), Hook(site.name, "pre", on_attention(lay)),
                      Hook(site.wo, "post", on_wo(lay))]  # fmt: skip
            inside = site.name + "."
            for name, _mod in lm.model.get_submodule(top).named_modules():
                full = f"{top}.{name}" if name else top
                if name and not full.startswith(inside) and full != site.name:
                    hooks.append(Hook(full, "post", on_sub(lay, full)))
        return rec, tuple(hooks)

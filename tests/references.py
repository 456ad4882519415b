"""Trusted results shared by several test files (issue 36 §4: test files import helpers, never each other): a model's
own eager attentions and W^O outputs, token labels for raw ids, and the "it" → "animal" head found from every layer's
whole pattern (independent of the app's cache)."""

from __future__ import annotations

import copy

import numpy as np
import torch

from conftest import SENTENCE
from mha_viz.analysis.referents import default_pair, specific_head
from mha_viz.config import Config
from mha_viz.models.load import LoadedModel
from mha_viz.models.tokens import Tokens
from mha_viz.pipeline.road import traces

TOL = 1e-5  # our trace against the eager model's own attention


def output_gap(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """The largest difference of two W^O outputs, relative to their size where it is above 1: float32 keeps ~7
    digits, so at SmolLM2's |x| = 180 (layer 24) one step is 1.5e-5, above TOL; with one BLAS thread on some CPUs
    the recomputed output differs from the model's by 3 such steps. Compare with ``<= TOL``."""
    return (ours - theirs).abs().max().item() / max(1.0, theirs.abs().max().item())


def id_tokens(ids: list[int]) -> Tokens:
    """Tokens for raw ids, labelled t0, t1, ..."""
    names = tuple(f"t{i}" for i in range(len(ids)))
    return Tokens(tuple(ids), names, names, tuple(False for _ in ids))


def reference(model: torch.nn.Module, lm: LoadedModel, kwargs: dict) -> tuple[dict, dict]:
    """The eager model's own attentions {(part, layer): [b, h, q, k]} and W^O outputs {(part, layer): [b, q, d]}."""
    wo_out: dict = {}
    handles = []
    for site in lm.sites:

        def hook(_m, _a, out, key=(site.part, site.layer)):
            wo_out[key] = out.detach()

        handles.append(model.get_submodule(site.wo).register_forward_hook(hook))
    with torch.no_grad():
        out = model(**kwargs, output_attentions=True)
    for h in handles:
        h.remove()
    if lm.encoder_decoder:
        by_part = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    else:
        by_part = {lm.parts[0]: out.attentions}
    attn = {(p, i): a.detach() for p, found in by_part.items() for i, a in enumerate(found)}
    return attn, wo_out


def found_head(model: str) -> tuple[int, int, float]:
    """The "it" → "animal" head of ``model``: where "it"'s weight on "animal" stands out most from the other
    tokens' (referents.specific_head), from every layer's whole pattern (independent of the app's cache)."""
    tokens, _, found = traces(Config(model=model), SENTENCE)
    pair = default_pair(list(tokens.labels))
    assert pair is not None
    patterns = np.stack([t.pattern.numpy() for t in found])  # [L, H, n, n]
    return specific_head(patterns, *pair)[:3]


def kv_names(site) -> tuple[str, str]:
    """The key and the value projection (rotary models: the key's before its rotation)."""
    return (site.qkv[1], site.qkv[2]) if site.qkv else (site.pre_rotary[1], site.v)


def kv_pooled_copy(lm: LoadedModel, part: str, groups: tuple[tuple[int, ...], ...]) -> torch.nn.Module:
    """A deep copy of ``lm.model`` whose K and V projections' rows (weights and biases) are their group's mean in
    every layer of ``part``: the GQA conversion written as a weight edit (Ainslie et al.), nothing of mha_viz's
    capture (plain layers: BERT's key/value; LLaMA's k_proj/v_proj). The shared model is not touched."""
    model = copy.deepcopy(lm.model)
    for site in (s for s in lm.sites if s.part == part):
        for name in kv_names(site):
            lin = model.get_submodule(name)  # nn.Linear weight [n_kv * d_head, d_model]
            dh = lin.weight.shape[0] // lm.n_kv_heads
            with torch.no_grad():
                for params in (p for p in (lin.weight, lin.bias) if p is not None):
                    rows = params.view(lm.n_kv_heads, dh, *params.shape[1:])  # [n_kv, d_head, (d_model)]
                    for g in groups:
                        rows[list(g)] = rows[list(g)].mean(0, keepdim=True)
    return model

"""Share keys and values: a trained model's multi-head attention converted to grouped-query (GQA) and multi-query
(MQA) attention without training, on the user's model (Ainslie et al. 2023, "GQA"; Shazeer 2019, "MQA").

The K/V heads of every layer are split into g groups (g divides the model's own K/V head count); each group's key
and value projections become the mean of its members' (weights and biases), and every query head that read a
member reads the pooled head. Done at the attention call (a ShareKV intervention through pipeline.run): the mean of
the members' keys and values, which is the pooled projection's output because a projection is linear, and after
rotary embeddings as well (the rotation at a position is the same linear map for every head). With QK-norm (Qwen3,
OLMo 2) the pooled key is the mean of the normalised keys (the norm is not linear: not a weight edit there).

Groupings:
- ``mean``: consecutive K/V heads form a group (Ainslie et al.);
- ``aligned``: heads with similar keys and values on the texts grouped together first (equal-size groups grown
  greedily from the most similar pair; similarity = the mean of the cosines of the flattened keys and of the
  flattened values, per layer, in the unconverted model), then pooled. After 2412.20677's point that heads should
  be matched before merging. The grouping is fitted on the same texts it is measured on;
- ``orthogonal``: consecutive groups, but before pooling each member's keys and values are rotated by an orthogonal
  matrix onto the group's first head (orthogonal Procrustes on the heads' keys, and values, on the texts; 2412.20677):
  its query heads' queries are rotated by the same R_K (scores (Q R)(K R)ᵀ = Q Kᵀ) and their outputs back by R_Vᵀ
  (folded into W^O), so the rotation alone changes nothing. Plain keys: any orthogonal R_K (foldable into W_Q and W_K).
  Rotary keys: R_K made of one 2×2 rotation per frequency pair (dims i and i + d_head/2, transformers' rotate_half),
  which commutes with rotary, so it folds into W_Q and W_K too. Keys after QK-norm or fused projections: R_K = I
  (only the values are rotated). Fitted on the same texts it is measured on, which flatters it: on MiniLM at 6 K/V
  heads, 0.04 fitted on the text, 0.25 fitted on another text, 0.30 mean-pooled (SmolLM2 at 1 K/V head: 2.2, 4.1,
  6.5 nats).

The output change is Head importance's measure (importance.Scorer): encoders 1 − cos of the sentence embedding,
decoders the increase of the mean next-token loss (nats). KV cache: 2 · layers · g · d_head · tokens · 4 bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.analysis.patterns import js_distance
from mha_viz.attention import attention_pattern
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline.door import Intervention, Rotate, ShareKV
from mha_viz.pipeline.road import encode, layer_at
from mha_viz.studies.importance import Scorer
from mha_viz.studies.variant_groups import (  # noqa: F401 (the grouping maths: importable from here as before)
    Groups,
    aligned_groups,
    consecutive_groups,
    kv_counts,
    orthogonal_rotations,
    pair_rotation,
    procrustes,
    similarity,
)
from mha_viz.trace import MhaVizError

Progress = Callable[[float, str], None]
GROUPINGS = {
    "mean": "consecutive heads, mean-pooled",
    "aligned": "similar heads grouped, then mean-pooled",
    "orthogonal": "consecutive heads rotated onto the group's first (Procrustes), then mean-pooled",
}
LONG_CONTEXT = 32_768  # the stated long context the cache is also given for
CACHE_FORMULA = "2 · layers · kv_heads · d_head · tokens · 4 bytes (keys and values, float32)"


def kv_cache_bytes(
    n_layers: int, kv_heads: int, d_head: int, tokens: int, bytes_per_value: int = torch.float32.itemsize
) -> int:
    """The key/value cache of ``tokens`` tokens: keys and values of every K/V head of every layer."""
    return 2 * n_layers * kv_heads * d_head * tokens * bytes_per_value


def key_kind(lm: LoadedModel, part: str, layer: int) -> str:
    """How a layer's keys may be rotated: "plain", "rotary" or "none" (see orthogonal_rotations)."""
    site = layer_at(lm, None, part, layer).site  # the layer resolved once (an unknown one is refused)
    return "plain" if site.qkv else "rotary" if site.pre_rotary else "none"


def check_model(lm: LoadedModel) -> None:
    """Refuse a model whose keys and values do not come from separate K/V heads (a shared latent: MLA)."""
    if getattr(lm.model.config, "kv_lora_rank", None):
        raise MhaVizError(
            f"{lm.name} computes keys and values from one shared latent (multi-head latent attention): there are no "
            "separate K/V heads to pool, and its cache is the latent, not 2 · kv_heads · d_head per token"
        )


@dataclass(frozen=True, eq=False)
class Point:
    grouping: str
    kv_heads: int
    kv_cache_bytes: float  # over the text's tokens (the mean over the texts)
    long_cache_bytes: int  # over LONG_CONTEXT tokens
    change: float
    groups: tuple[Groups, ...]  # per layer


@dataclass(frozen=True, eq=False)
class Study:
    """Every (grouping, g) conversion of one attention part, the whole model converted at once."""

    points: tuple[Point, ...]
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    tokens: float  # mean tokens per text

    def curve(self, grouping: str) -> list[Point]:
        return [p for p in self.points if p.grouping == grouping]


def _layer_kv(lm: LoadedModel, scorer: Scorer) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer's keys and values in the unconverted model, the texts' positions concatenated.
    Shapes: each k, v [n_kv_heads, total_pos, d_head]."""
    per: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for t in scorer.texts:
        run = pipeline.run(lm, t.ids, decoder_ids=t.dec, extras=False)
        for (part, layer), call in run.calls.items():
            if part == scorer.part:
                per.setdefault(layer, []).append((call.k[0], call.v[0]))  # [n_kv, pos, dh] each
    return [(torch.cat([k for k, _ in per[la]], 1), torch.cat([v for _, v in per[la]], 1)) for la in sorted(per)]


def layer_groups(
    grouping: str, g: int, n_kv_heads: int, n_layers: int, sims: Sequence[np.ndarray] | None = None
) -> tuple[Groups, ...]:
    """Each layer's groups for ``grouping``: "mean" (consecutive) or "aligned" (from each layer's similarity
    ``sims``, see similarity())."""
    if grouping in ("mean", "orthogonal"):
        return (consecutive_groups(n_kv_heads, g),) * n_layers
    if grouping != "aligned":
        raise MhaVizError(f"unknown grouping {grouping!r}; choose one of: {', '.join(GROUPINGS)}")
    if sims is None:
        raise MhaVizError("aligned grouping needs the heads' similarities")
    return tuple(aligned_groups(s, g) for s in sims)


def share_plan(part: str, groups: Sequence[Groups]) -> dict[tuple[str, int], Groups]:
    """Every layer's groups of ``part`` as {(part, layer): groups} (nothing for layers left as they are; conversion()
    makes the interventions)."""
    return {(part, la): gr for la, gr in enumerate(groups) if any(len(x) > 1 for x in gr)}


def rotation_plan(
    part: str, groups: Sequence[Groups], kv: Sequence[tuple[torch.Tensor, torch.Tensor]], kinds: Sequence[str]
) -> dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]]:
    """The orthogonal grouping's {(part, layer): (R_K, R_V)}: every converted layer's rotations, fitted on ``kv``
    (each layer's unconverted keys and values, _layer_kv; conversion() makes the interventions)."""
    return {
        (part, la): orthogonal_rotations(kv[la][0], kv[la][1], gr, kinds[la])
        for la, gr in enumerate(groups)
        if any(len(x) > 1 for x in gr)
    }


def conversion(
    share: Mapping[tuple[str, int], Groups],
    rotate: Mapping[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> list[Intervention]:
    """The interventions of a conversion for pipeline.run: ShareKV per layer of ``share`` (share_plan), Rotate per
    layer of ``rotate`` (rotation_plan; applied before the pooling whatever their order)."""
    steps: list[Intervention] = [
        ShareKV(p, la, tuple(tuple(int(h) for h in g) for g in gs)) for (p, la), gs in share.items()
    ]
    return steps + [Rotate(p, la, r_k, r_v) for (p, la), (r_k, r_v) in (rotate or {}).items()]


def study(
    lm: LoadedModel,
    texts: Sequence[str],
    part: str | None = None,
    target: str | None = None,
    groupings: Sequence[str] = tuple(GROUPINGS),
    progress: Progress | None = None,
) -> Study:
    """The whole-model output change and KV cache for every group count and grouping."""
    check_model(lm)
    scorer = Scorer(lm, texts, part, target)
    n_layers, kvh = lm.n_layers(scorer.part), lm.n_kv_heads
    t0 = scorer.texts[0]
    probe = pipeline.run(lm, t0.ids, decoder_ids=t0.dec, extras=False, only=(scorer.part, 0))
    d_head = int(probe.calls[(scorer.part, 0)].k.shape[-1])
    key_ids = [(t.dec if (t.dec is not None and scorer.part == "decoder") else t.ids) for t in scorer.texts]
    tokens = float(np.mean([ids.shape[1] for ids in key_ids]))
    jobs = [(gr, g) for gr in groupings for g in kv_counts(kvh)]
    kv = _layer_kv(lm, scorer) if {"aligned", "orthogonal"} & set(groupings) else []
    sims = [similarity(k, v) for k, v in kv] if "aligned" in groupings else None
    kinds = [key_kind(lm, scorer.part, la) for la in range(n_layers)]
    points = []
    for i, (grouping, g) in enumerate(jobs):
        if progress:
            progress(i / len(jobs), f"{GROUPINGS.get(grouping, grouping)}: {g} K/V heads ({i + 1} of {len(jobs)})")
        groups = layer_groups(grouping, g, kvh, n_layers, sims)
        plan = share_plan(scorer.part, groups)
        rotate = rotation_plan(scorer.part, groups, kv, kinds) if grouping == "orthogonal" and plan else None
        change = scorer.change(*conversion(plan, rotate), what=f"with {g} K/V heads") if plan else 0.0
        points.append(
            Point(grouping, g, kv_cache_bytes(n_layers, g, d_head, 1) * tokens,
                  kv_cache_bytes(n_layers, g, d_head, LONG_CONTEXT), change, groups)
        )  # fmt: skip
    return Study(tuple(points), n_layers, lm.n_heads, kvh, d_head, tokens)


def layer_patterns(
    lm: LoadedModel,
    text: str,
    target: str | None,
    part: str,
    layer: int,
    *interventions: Intervention,
) -> np.ndarray:
    """One layer's attention pattern in a pass with ``interventions`` (none: the model's own; a conversion() of
    every layer, values put in by Replace, ...). Shapes: returns [n_heads, q_pos, k_pos] float32."""
    tokens, target_tokens = encode(lm, text, target)
    dec = None if target_tokens is None else torch.tensor([target_tokens.ids])
    run = pipeline.run(
        lm, torch.tensor([tokens.ids]), *interventions, decoder_ids=dec, extras=False, only=(part, layer)
    )
    c = run.calls[(part, layer)]
    _, pattern, _ = attention_pattern(
        c.q[0], c.k[0], scale=c.scaling, softcap=c.softcap, allowed=None if c.allowed is None else c.allowed[0],
        bias=None if c.bias is None else c.bias[0], sink=c.sink,
    )  # fmt: skip
    return pattern.numpy().astype(np.float32)  # [h, q_pos, k_pos]


def converted_patterns(
    lm: LoadedModel, text: str, target: str | None, part: str, layer: int, grouping: str, groups: Sequence[Groups]
) -> np.ndarray:
    """One layer's pattern with every layer converted to ``groups`` by ``grouping`` (orthogonal: the rotations
    fitted on this text, as study() does for one text). Shapes: returns [n_heads, q_pos, k_pos]."""
    plan = share_plan(part, groups)
    rotate = None
    if grouping == "orthogonal" and plan:
        scorer = Scorer(lm, [text], part, target)
        kinds = [key_kind(lm, scorer.part, la) for la in range(len(groups))]
        rotate = rotation_plan(scorer.part, groups, _layer_kv(lm, scorer), kinds)
    return layer_patterns(lm, text, target, part, layer, *conversion(plan, rotate))


def head_change(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Each head's mean Jensen-Shannon distance over query rows. Shapes: [h, q, k] twice -> [h]."""
    return js_distance(before, after).mean(-1)

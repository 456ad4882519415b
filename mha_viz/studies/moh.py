"""Training-free mixture of heads (after Jin et al. 2024, "MoH: Multi-Head Attention as Mixture-of-Head Attention",
arXiv 2410.11842), on the user's model without training.

MoH trains a router that activates the top-k heads per token. Here the router's stand-in is the heads' own
contribution: per token and layer, the k heads whose output after W^O (‖z_h · W_O^h‖, that token's row) is
largest are kept and the others zeroed on their way into W^O (capture's per-token route), in every layer of the
part at once, each layer routed on its inputs in the routed pass. No router weights: the kept heads are summed
unweighted, as in the model.

Against it, static pruning of the same average number of heads per layer: L · (h − k) heads removed for every
token, in importance order (importance.pruning_order: the pruning curve's order). The measure is Head
importance's (importance.Scorer): encoders 1 − cos of the sentence embedding, decoders the increase of the mean
next-token loss (nats).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import Route
from mha_viz.pipeline.road import encode
from mha_viz.pipeline.weights import output_projection
from mha_viz.studies.importance import Progress, Scorer, head_importance, pruning_order
from mha_viz.trace import MhaVizError

ROUTER = "per token, the k heads whose output after W^O (‖z_h · W_O^h‖, the token's row) is largest"


def head_wo(lm: LoadedModel, part: str) -> list[torch.Tensor]:
    """Every layer's W^O per head (copies). Shapes: each [n_heads, d_head, d_model]."""
    out = []
    for la in range(lm.n_layers(part)):
        w, _ = output_projection(lm, part, la)  # [h*dh, d]
        out.append(w.reshape(lm.n_heads, -1, w.shape[-1]).float())
    return out


def contributions(z: torch.Tensor, W_O: torch.Tensor) -> torch.Tensor:
    """‖z_h · W_O^h‖ per token and head. Shapes: z [b, q_pos, h, dh], W_O [h, dh, d] -> [b, q_pos, h]."""
    return torch.einsum("bqhe,hed->bqhd", z.float(), W_O.to(z.device)).norm(dim=-1)


def top_k_mask(norms: torch.Tensor, k: int) -> torch.Tensor:
    """1 for each row's k largest entries (ties: lower head), else 0. Shapes: norms [..., h] -> the same."""
    h = norms.shape[-1]
    if not 0 <= k <= h:
        raise MhaVizError(f"keep between 0 and {h} heads per token, not {k}")
    mask = torch.zeros_like(norms)
    if k:
        mask.scatter_(-1, norms.topk(k, dim=-1, sorted=False).indices, 1.0)
    return mask


def router(part: str, k: int, wo: list[torch.Tensor], usage: dict | None = None) -> Callable:
    """The top-k mask of every layer of ``part`` as route(part, layer, out) (routes() makes the interventions);
    ``usage`` (if given) collects each layer's mask [q_pos, h] of batch item 0."""

    def route(p: str, layer: int, z: torch.Tensor) -> torch.Tensor | None:
        if p != part:
            return None
        mask = top_k_mask(contributions(z, wo[layer]), k)  # [b, q_pos, h]
        if usage is not None:
            usage[layer] = mask[0].cpu().numpy().astype(bool)
        return mask

    return route


def routes(part: str, k: int, wo: list[torch.Tensor], usage: dict | None = None) -> list[Route]:
    """The router as interventions for pipeline.run: one Route per layer of ``part`` (``wo`` one W^O per layer)."""
    route = router(part, k, wo, usage)
    return [Route(part, la, functools.partial(route, part, la)) for la in range(len(wo))]


def head_usage(lm: LoadedModel, text: str, target: str | None, part: str, k: int) -> np.ndarray:
    """Which heads each token keeps in every layer of the routed pass. Shapes: returns [L, q_pos, h] bool."""
    tokens, target_tokens = encode(lm, text, target)
    dec = None if target_tokens is None else torch.tensor([target_tokens.ids])
    usage: dict[int, np.ndarray] = {}
    pipeline.run(
        lm, torch.tensor([tokens.ids]), *routes(part, k, head_wo(lm, part), usage), decoder_ids=dec, record=False
    )
    return np.stack([usage[la] for la in sorted(usage)])


@dataclass(frozen=True, eq=False)
class MohCurve:
    ks: np.ndarray  # [n] heads kept per token and layer
    routed: np.ndarray  # [n] the measure with per-token top-k routing
    static: np.ndarray  # [n] the measure with L · (h − k) heads pruned in importance order
    n_heads: int
    n_layers: int


def moh_curve(
    lm: LoadedModel,
    texts: list[str],
    part: str | None = None,
    target: str | None = None,
    importance: np.ndarray | None = None,
    progress: Progress | None = None,
) -> MohCurve:
    """Routed against static, for every k from 0 to h. ``importance`` [L, h] (Head importance's; computed when
    None) orders the static pruning."""
    scorer = Scorer(lm, texts, part, target)
    h, L = lm.n_heads, lm.n_layers(scorer.part)
    if importance is None:
        importance = head_importance(scorer, None if progress is None else (lambda f, s: progress(f / 2, s)))
    order = pruning_order(importance)
    wo = head_wo(lm, scorer.part)
    ks = np.arange(h + 1)
    routed, static = [], []
    for i, k in enumerate(ks):
        if progress:
            progress(0.5 + i / (2 * len(ks)), f"keeping {k} of {h} heads per token ({i + 1} of {len(ks)})")
        routed.append(scorer.change(*routes(scorer.part, int(k), wo), what=f"keeping {k} heads per token"))
        static.append(scorer.score(order[: L * (h - int(k))]))
    return MohCurve(ks, np.asarray(routed), np.asarray(static), h, L)

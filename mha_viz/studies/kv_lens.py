"""What the cache keeps (issue 39): a text's first tokens (the prefix) are the cached part; a policy
(analysis/kv_policies.py) evicts keys per K/V head from a recorded prefill; the rest of the text (the continuation)
is then read with only the kept keys among the prefix, through the one door (a CacheMask per layer: exactly a
compressed cache, since the prefix's own queries still read everything, as the prefill that made the cache did).

Measured against the uncompressed run: the KL divergence KL(full ‖ compressed) of the next-token distribution after
the text, the top-5 before and after, the change of the teacher-forced loss on the continuation (mean cross-entropy,
nats), the attention mass each query head loses (the weight the full cache's continuation queries gave the evicted
keys, their mean over those queries), and which heads' evictions cause the change (one K/V head's full cache restored
at a time). Budgets are per K/V head (the cache holds keys and values per K/V head: a group's query heads read the
same kept keys). Cache bytes: kept (token, K/V head) pairs × layers' keys and values × d_head × 4 bytes (float32).
The seed's GQA/MQA sharing (studies/variants.py, ShareKV on every layer) is one more point on the same axes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.analysis import kv_policies as kvp
from mha_viz.config import KV_BUDGETS, KV_OBS_WINDOW, KV_PREFIX_SHARE, Config
from mha_viz.models.interventions import CacheMask, Intervention, ShareKV
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline.road import Recording, encode
from mha_viz.pipeline.rows import CHUNK_CELLS, layer_rows
from mha_viz.pipeline.weights import unembed
from mha_viz.studies.variants import consecutive_groups, kv_cache_bytes
from mha_viz.trace import MhaVizError

Progress = Callable[[float, str], None]
BYTES = torch.float32.itemsize
TOP = 5


@dataclass(frozen=True, eq=False)
class Prefill:
    """One text through the model, uncompressed. Shapes: ids [1, n]; cont [L, H, P]: the continuation queries' mean
    weight on each prefix key (full cache); logp_next [vocab]: log-probabilities of the token after the text."""

    ids: torch.Tensor
    prefix: int
    part: str
    labels: tuple[str, ...]
    stats: kvp.PrefillStats
    cont: np.ndarray
    d_head: int
    logp_next: torch.Tensor
    loss: float

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.cont.shape  # (L, H, P)


@dataclass(frozen=True, eq=False)
class Point:
    """One policy at one budget. Shapes: keep [L, kv, P] bool; lost [L, H] per query head."""

    policy: str
    budget: float
    kv_bytes: int
    kl: float
    loss_change: float
    lost_mass: float
    top_before: list[tuple[str, float]]
    top_after: list[tuple[str, float]]
    keep: np.ndarray | None = None
    lost: np.ndarray | None = None


def check_model(lm: LoadedModel) -> None:
    if not lm.causal_lm:
        raise MhaVizError(f"{lm.name} has no next-token head: the KV cache lens needs a causal language model")


def prefill(
    lm: LoadedModel, text: str, prefix_share: float = KV_PREFIX_SHARE, progress: Progress | None = None
) -> Prefill:
    """Record the text once and collect what the policies and the lost mass read (the model's own weights)."""
    check_model(lm)
    if not 0 < prefix_share < 1:
        raise MhaVizError(f"the cached prefix is a share of the text between 0 and 1, not {prefix_share}")
    tokens, _ = encode(lm, text)
    n = len(tokens.ids)
    if n < 4:
        raise MhaVizError("the KV cache lens needs a text of at least 4 tokens (a prefix and a continuation)")
    p = min(n - 2, max(2, round(prefix_share * n)))
    ids = torch.tensor([tokens.ids])
    run = pipeline.run(lm, ids, extras=False)
    rec, part = Recording(tokens, None, run, slim=True), lm.part(None)
    n_layers, cfg = lm.n_layers(part), Config()
    acc, obs, last, cont = [], [], [], []
    window = min(KV_OBS_WINDOW, p)
    for layer in range(n_layers):
        if progress:
            progress(layer / n_layers, f"Reading layer {layer} of the prefill")
        h = int(run.calls[(part, layer)].q.shape[1])
        step = max(1, CHUNK_CELLS // (h * n))
        col = np.zeros((h, p))  # [h, P]
        win, tail = np.zeros((h, p)), np.zeros((h, p))
        for r in range(0, n, step):
            rows = layer_rows(lm, rec, part, layer, cfg, slice(r, min(n, r + step)))[..., :p].astype(np.float64)
            qs = np.arange(r, min(n, r + step))  # [r] the rows' positions
            col += rows[:, qs < p].sum(1)
            win += rows[:, (qs >= p - window) & (qs < p)].sum(1)
            tail += rows[:, qs >= p].sum(1)
            if (qs == p - 1).any():
                last.append(rows[:, int(np.flatnonzero(qs == p - 1)[0])])
        acc.append(col), obs.append(win), cont.append(tail / (n - p))
    stats = kvp.PrefillStats(np.stack(acc), np.stack(obs), np.stack(last), lm.n_kv_heads, window)
    logp, loss = _outputs(lm, run.hidden, ids, p)
    d_head = int(run.calls[(part, 0)].k.shape[-1])
    return Prefill(ids, p, part, tokens.labels, stats, np.stack(cont), d_head, logp, loss)


def _outputs(lm: LoadedModel, hidden: torch.Tensor, ids: torch.Tensor, p: int) -> tuple[torch.Tensor, float]:
    """The next-token log-probabilities after the text and the mean loss on the continuation, from the last hidden
    state (the LM head on rows P-1…n-1 only). Shapes: hidden [1, n, d]; ids [1, n]; returns [vocab], float."""
    logp = torch.log_softmax(unembed(lm, hidden[0, p - 1 :]).double(), -1)  # [n - P + 1, vocab]
    loss = -logp[:-1].gather(1, ids[0, p:, None]).mean()
    if not torch.isfinite(loss):
        raise MhaVizError(f"{lm.name}'s loss on the continuation was not a finite number")
    return logp[-1], float(loss)


def cache_masks(pre: Prefill, keep: np.ndarray) -> list[Intervention]:
    """One CacheMask per layer that evicts anything (keep [L, kv, P] per K/V head, spread to its query heads)."""
    L, H, _ = pre.shape
    out: list[Intervention] = []
    for layer in range(L):
        if keep[layer].all():
            continue
        per_q = np.repeat(keep[layer], H // keep.shape[1], axis=0)  # [H, P]
        out.append(CacheMask(pre.part, layer, torch.from_numpy(per_q), start=pre.prefix))
    return out


def lost_mass(pre: Prefill, keep: np.ndarray) -> np.ndarray:
    """Each query head's lost mass: the full cache's continuation weight on the keys its K/V head evicts.
    Shapes: keep [L, kv, P]; returns [L, H]."""
    per_q = np.repeat(keep, pre.shape[1] // keep.shape[1], axis=1)  # [L, H, P]
    return np.where(per_q, 0.0, pre.cont).sum(-1)


def kv_bytes(pre: Prefill, keep: np.ndarray) -> int:
    """The prefix's cache: each kept (layer, K/V head, token) holds a key and a value of d_head floats."""
    return int(keep.sum()) * 2 * pre.d_head * BYTES


def _top(lm: LoadedModel, logp: torch.Tensor) -> list[tuple[str, float]]:
    p, i = logp.exp().topk(TOP)
    return [(lm.tokenizer.decode([int(t)]), float(v)) for v, t in zip(p, i, strict=True)]


def measure(lm: LoadedModel, pre: Prefill, *interventions: Intervention) -> tuple[torch.Tensor, float]:
    """The next-token log-probabilities and the continuation loss of one pass with ``interventions``."""
    run = pipeline.run(lm, pre.ids, *interventions, record=False, extras=False)
    return _outputs(lm, run.hidden, pre.ids, pre.prefix)


def _point(lm: LoadedModel, pre: Prefill, name: str, budget: float, nbytes: int, *steps: Intervention,
           keep: np.ndarray | None = None) -> Point:  # fmt: skip
    logp, loss = measure(lm, pre, *steps) if steps else (pre.logp_next, pre.loss)
    kl = float((pre.logp_next.exp() * (pre.logp_next - logp)).sum())
    lost = None if keep is None else lost_mass(pre, keep)
    mean_lost = float("nan") if lost is None else float(lost.mean())
    return Point(name, budget, nbytes, kl, loss - pre.loss, mean_lost, _top(lm, pre.logp_next), _top(lm, logp), keep,
                 lost)  # fmt: skip


def evaluate(lm: LoadedModel, pre: Prefill, policy: str, budget: float) -> Point:
    """``policy`` at ``budget`` (a share of the prefix or tokens per K/V head): masks, one pass, the measures."""
    keep = kvp.keep_mask(policy, pre.stats, budget)
    return _point(lm, pre, policy, budget, kv_bytes(pre, keep), *cache_masks(pre, keep), keep=keep)


def share_point(lm: LoadedModel, pre: Prefill, groups: int = 1) -> Point:
    """The seed's GQA/MQA sharing (Variants, mean-pooled consecutive groups) on every layer as a point on the same
    axes; budget = groups / kv (its cache relative to the model's). Not an eviction: the whole pass is converted."""
    plan = consecutive_groups(lm.n_kv_heads, groups)
    steps = [ShareKV(pre.part, la, plan) for la in range(pre.shape[0])]
    nbytes = kv_cache_bytes(pre.shape[0], groups, pre.d_head, pre.prefix)
    return _point(lm, pre, f"share→{groups} K/V", groups / lm.n_kv_heads, nbytes, *steps)


def curve(
    lm: LoadedModel, pre: Prefill, policies: Sequence[str] = tuple(kvp.POLICIES), budgets: Sequence[float] = KV_BUDGETS,
    progress: Progress | None = None,
) -> list[Point]:  # fmt: skip
    """Every policy at every budget, then the sharing points (each K/V group count below the model's)."""
    jobs = [(p, b) for p in policies for b in budgets]
    out = []
    for i, (p, b) in enumerate(jobs):
        if progress:
            progress(i / len(jobs), f"{kvp.POLICY_NAMES[p]} at {b:.0%}")
        out.append(evaluate(lm, pre, p, b))
    out += [share_point(lm, pre, g) for g in range(1, lm.n_kv_heads) if lm.n_kv_heads % g == 0]
    return out


def restore_map(lm: LoadedModel, pre: Prefill, keep: np.ndarray, progress: Progress | None = None) -> np.ndarray:
    """Which heads' evictions cause the change: for each (layer, K/V head) that evicts anything, the compressed loss
    minus the loss with that head's full cache restored (0 where it evicts nothing). Shapes: keep [L, kv]; returns
    [L, kv] nats."""
    _, compressed = measure(lm, pre, *cache_masks(pre, keep))
    out = np.zeros(keep.shape[:2])
    heads = [(la, j) for la in range(keep.shape[0]) for j in range(keep.shape[1]) if not keep[la, j].all()]
    for i, (la, j) in enumerate(heads):
        if progress:
            progress(i / len(heads), f"Restoring layer {la}, K/V head {j} ({i + 1} of {len(heads)})")
        restored = keep.copy()
        restored[la, j] = True
        out[la, j] = compressed - measure(lm, pre, *cache_masks(pre, restored))[1]
    return out

"""Activation patching per head (Wang et al. 2022, "Interpretability in the Wild"; Heimersheim & Nanda 2024):
which heads carry the difference between a clean text and a corrupted one to the output.

Run the corrupted text with one head's activation replaced by its value in the clean run, and measure how
much of the clean behaviour returns. The activation is the head's output (its slice of W^O's input, at every
position or at one), or its q, k or v as the model used them (after rotary embeddings; k and v per K/V head
on grouped-query models). Values are put in through Replace interventions (pipeline.run,
models/interventions.py), for one pass only: the shared model is never changed.

The metric, one number per run:
- models with an LM head: logit(answer) − logit(wrong) at the last position (single tokens);
- encoders: at the last layer, cos(h_focus, h_referent1) − cos(h_focus, h_referent2).
recovered = (patched − corrupted) / (clean − corrupted): 1 = the head alone brings the clean value back.

Several patched runs go through one forward pass as a batch (the corrupted text repeated, a different head
patched in each row); the clean activations are recorded once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch

from mha_viz import pipeline
from mha_viz.analysis.referents import word
from mha_viz.models.load import LoadedModel
from mha_viz.models.tokens import Tokens
from mha_viz.pipeline.door import ModelRun, Replace
from mha_viz.pipeline.road import encode
from mha_viz.studies.patch_pair import Metric, Pair, Sources
from mha_viz.trace import MhaVizError

Progress = Callable[[float, str], None]
Patch = tuple[int, int, int | None]  # (layer, head, position); head: a K/V head for k and v; position None: all
WHATS = {"out": "head output", "q": "query", "k": "key", "v": "value"}
IOI = (
    "When Mary and John went to the store, John gave a drink to",
    "When Mary and John went to the store, Mary gave a drink to",
)
IOI_ANSWERS = (" Mary", " John")
REFERENTS = ("it", "animal", "street")  # focus, referent 1, referent 2 (Two sentences' pair)


def heads_of(lm: LoadedModel, what: str) -> int:
    """How many heads ``what`` has per layer: K/V heads for k and v, query heads otherwise."""
    return lm.n_kv_heads if what in ("k", "v") else lm.n_heads


def sharing(lm: LoadedModel, kv_head: int) -> range:
    """The query heads that read K/V head ``kv_head`` (head h reads group h // (n_heads / n_kv_heads))."""
    group = lm.n_heads // lm.n_kv_heads
    return range(kv_head * group, (kv_head + 1) * group)


def record_sources(lm: LoadedModel, part: str, ids: torch.Tensor) -> tuple[ModelRun, Sources]:
    """One recorded run of ``ids`` and every layer's q, k, v and head outputs in the layouts patching puts back.
    Shapes: ids [1, pos]."""
    run = pipeline.run(lm, ids)
    sources: Sources = {}
    for layer in range(lm.n_layers(part)):
        call = run.calls[(part, layer)]
        sources[(layer, "out")] = call.wo_in.view(*call.wo_in.shape[:2], lm.n_heads, -1)  # [1, pos, h, dh]
        sources[(layer, "q")], sources[(layer, "k")], sources[(layer, "v")] = call.q, call.k, call.v
    return run, sources


def _token(lm: LoadedModel, text: str) -> int:
    ids = list(lm.tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(ids) != 1:
        raise MhaVizError(
            f"{text!r} is {len(ids)} tokens for {lm.name}; the answer and the wrong must be one token each"
        )
    return int(ids[0])


def _positions(clean: Tokens, corrupt: Tokens, names: Sequence[str]) -> tuple[int, int, int]:
    """The focus (its last occurrence) and the two referents (their first) in both texts, at the same positions."""
    found = []
    for i, name in enumerate(names):
        at = [j for j, label in enumerate(clean.labels) if word(label) == name.strip().lower()]
        if not at:
            raise MhaVizError(
                f"{name!r} is not a token of the clean text; choose the focus and referents from its words"
            )
        pos = at[-1] if i == 0 else at[0]
        if word(corrupt.labels[pos]) != word(clean.labels[pos]):
            raise MhaVizError(f"{name!r} is not at the same position in the corrupted text; change the other words")
        found.append(pos)
    return found[0], found[1], found[2]


def prepare(
    lm: LoadedModel,
    clean: str,
    corrupt: str,
    answer: str | None = None,
    wrong: str | None = None,
    focus: str = REFERENTS[0],
    referents: tuple[str, str] = REFERENTS[1:],
) -> Pair:
    """Tokenise both texts, check them, record the clean run and measure both. Decoders (an LM head) take the
    logit difference answer − wrong (default " Mary" / " John"), encoders the cosine difference."""
    if lm.encoder_decoder:
        raise MhaVizError(f"{lm.name} is an encoder-decoder model; patching takes a decoder-only or encoder-only model")
    part = lm.parts[0]
    a, _ = encode(lm, clean)
    b, _ = encode(lm, corrupt)
    if len(a.ids) != len(b.ids):
        raise MhaVizError(
            f"the clean text is {len(a.ids)} tokens and the corrupted text {len(b.ids)}; patching needs texts of the "
            "same token length"
        )
    if lm.causal_lm:
        names = (answer or IOI_ANSWERS[0], wrong or IOI_ANSWERS[1])
        metric = Metric("logit", ids=(_token(lm, names[0]), _token(lm, names[1])), names=names)
    else:
        metric = Metric("cosine", positions=_positions(a, b, (focus, *referents)), names=(focus, *referents))
    clean_ids, corrupt_ids = torch.tensor([a.ids]), torch.tensor([b.ids])  # [1, pos] each
    clean_run, sources = record_sources(lm, part, clean_ids)
    pair = Pair(lm, part, b, clean_ids, corrupt_ids, metric, float(metric(clean_run)[0]), 0.0, sources)
    corrupted = float(metric(pipeline.run(lm, corrupt_ids, record=False))[0])
    if not np.isfinite([pair.clean, corrupted]).all() or abs(pair.clean - corrupted) < 1e-9:
        raise MhaVizError(
            f"the metric is {pair.clean:.6g} on the clean text and {corrupted:.6g} on the corrupted one; patching "
            "measures how much of a difference returns, so choose texts (or tokens) where they differ"
        )
    return dataclasses.replace(pair, corrupted=corrupted)


def batch_size(lm: LoadedModel, n_tokens: int) -> int:
    """Patched runs per forward pass, exactly as the budget counts them (estimates.patch_batch: at most
    MAX_PATCH_BATCH, at most PATCH_OUTPUT_BYTES of float32 outputs, at most PATCH_PASS_BYTES of activations)."""
    from mha_viz.pipeline import estimates

    width = getattr(getattr(lm.model, "config", None), "vocab_size", 0) if lm.causal_lm else 0
    d_head = lm.d_model // max(1, lm.n_heads)
    layers = max(lm.n_layers(p) for p in lm.parts)
    sizes = estimates.Sizes(n_tokens, n_tokens, lm.n_heads, lm.n_kv_heads, d_head, lm.d_model, layers, int(width or 0))
    return estimates.patch_batch(sizes)


def _where(src: torch.Tensor, b: int) -> torch.Tensor:
    """An all-False mask for ``b`` batch items in the layout of ``src``. Shapes: [b, pos, h, 1] or [b, h, pos, 1]."""
    return torch.zeros(b, *src.shape[1:3], 1, dtype=torch.bool)


def patched_runs(pair: Pair, what: str, runs: Sequence[Sequence[Patch]]) -> np.ndarray:
    """The metric of the corrupted text with, in run i, every (layer, head, position) of runs[i] patched with
    the clean run's value: all of ``runs`` in one forward pass. Shapes: returns [len(runs)]."""
    if what not in WHATS:
        raise MhaVizError(f"patch one of {', '.join(WHATS)}, not {what!r}")
    n_heads, n = heads_of(pair.lm, what), pair.corrupt_ids.shape[1]
    plan: dict[tuple[str, int, str], tuple[torch.Tensor, torch.Tensor]] = {}
    for i, patches in enumerate(runs):
        for layer, head, pos in patches:
            if not (0 <= head < n_heads and 0 <= layer < pair.n_layers and (pos is None or 0 <= pos < n)):
                raise MhaVizError(f"layer {layer}, head {head}, position {pos} is not in this model and text")
            key = (pair.part, layer, what)
            src = pair.sources[(layer, what)]
            where = plan.setdefault(key, (_where(src, len(runs)), src))[0]
            at = slice(None) if pos is None else pos
            if what == "out":
                where[i, at, head] = True  # [b, pos, h, 1]
            else:
                where[i, head, at] = True  # [b, h, pos, 1]
    ids = pair.corrupt_ids.expand(len(runs), -1)  # [b, pos]: the corrupted text in every row
    steps = [Replace(p, la, w, values, where) for (p, la, w), (where, values) in plan.items()]
    return pair.metric(pipeline.run(pair.lm, ids, *steps, record=False))


def run_batched(pair: Pair, what: str, runs: list[list[Patch]], progress: Progress | None, say: Callable[[int], str]):
    size = batch_size(pair.lm, pair.corrupt_ids.shape[1])
    out = []
    for start in range(0, len(runs), size):
        if progress:
            progress(start / len(runs), say(start))
        out.append(patched_runs(pair, what, runs[start : start + size]))
    return np.concatenate(out)


def patch_heads(pair: Pair, what: str = "out", progress: Progress | None = None) -> np.ndarray:
    """Every head patched alone at every position. Shapes: returns the metric [n_layers, heads_of(what)]."""
    L, H = pair.n_layers, heads_of(pair.lm, what)
    runs = [[(la, h, None)] for la in range(L) for h in range(H)]
    unit = "K/V heads" if what in ("k", "v") and pair.lm.n_heads != H else "heads"
    say = lambda i: f"Patching {WHATS[what]}s: {i} of {L * H} {unit}"
    return run_batched(pair, what, runs, progress, say).reshape(L, H)


def patch_positions(
    pair: Pair, layer: int, head: int, what: str = "out", progress: Progress | None = None
) -> np.ndarray:
    """One head patched at one position at a time. Shapes: returns the metric [pos]."""
    n = pair.corrupt_ids.shape[1]
    runs = [[(layer, head, p)] for p in range(n)]
    return run_batched(
        pair, what, runs, progress, lambda i: f"Patching layer {layer}, head {head}: {i} of {n} positions"
    )


def top_heads(recovered: np.ndarray, k: int = 5) -> list[tuple[int, int, float]]:
    """The k heads of largest |recovered|: (layer, head, recovered). Shapes: recovered [L, H]."""
    order = np.argsort(-np.abs(recovered), axis=None, kind="stable")[:k]
    return [(int(i) // recovered.shape[1], int(i) % recovered.shape[1], float(recovered.flat[i])) for i in order]

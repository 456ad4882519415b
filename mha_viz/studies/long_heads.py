"""The heads that matter at length (issue 38 §4): per head of a decoder on the user's own long text, the sink share,
the local share and the pattern recalls from one tiled pass (every weight exact, recomputed from each row's softmax
statistics: tiles.window_weights), the retrieval score from greedy generations with a needle placed at several depths
(Wu et al. 2024), the kinds (analysis/long_heads.py), and the masking experiment: the top-k retrieval heads zeroed vs
k random heads, the needle's recall before and after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mha_viz.analysis import long_heads as rules
from mha_viz.config import LONG_LAST_ROWS, LONG_LOCAL_TOKENS, LONG_SINK_TOKENS, TILE_BLOCK_CELLS
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import door
from mha_viz.pipeline.door import Call
from mha_viz.pooling import pool_factor
from mha_viz.tiles import allowed_of, item_rows, pooled, row_lse, whole_row_dead, window_weights
from mha_viz.trace import MhaVizError

DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)
NEEDLE = "The secret word of the day is tangerine."


@dataclass(frozen=True)
class Shares:
    """Per layer × head, from one tiled pass. Shapes: each [L, H]; recalls [L, H, 3] in rules.PATTERNS' order."""

    sink: np.ndarray
    local: np.ndarray
    recalls: np.ndarray


def _lse(call: Call) -> torch.Tensor:
    if call.row_lse is not None:
        return call.row_lse
    return row_lse(call.q, call.k, call.scaling, call.softcap, call.bias, _allowed(call), call.sink)


def _allowed(call: Call) -> torch.Tensor | None:
    return None if call.allowed is None else allowed_of(call.allowed)


def _window(call: Call, lse: torch.Tensor, rows: slice, keys: slice) -> torch.Tensor:
    """Batch item 0's exact weights of rows × keys. Shapes: returns [h, r, c] float32."""
    n_k = int(call.k.shape[-2])
    allowed = _allowed(call)
    return window_weights(call.q[:1, :, rows], call.k[:1, :, keys], lse[:1, :, rows], call.scaling, call.softcap,
                          item_rows(call.bias, rows, keys), item_rows(allowed, rows, keys), call.sink is not None, n_k,
                          whole_row_dead(allowed, rows))[0]  # fmt: skip


def layer_shares(call: Call, tile_cells: int, w: int = LONG_LOCAL_TOKENS, sinks: int = LONG_SINK_TOKENS) -> np.ndarray:
    """One layer's (sink share, local share, A-shape recall, vertical-slash recall, block-sparse recall) per head:
    the mean over query rows of the weight on the first ``sinks`` keys, on the last ``w`` keys (the query's own
    included) and on their union; the last LONG_LAST_ROWS rows' vertical-slash recall; the block-sparse recall of
    the pooled exact map (the tiles recorded in the pass, else pooled from the statistics at ``tile_cells`` a side).
    Shapes: returns [5, h]."""
    lse = _lse(call)
    n, n_k, h = int(call.q.shape[-2]), int(call.k.shape[-2]), int(call.q.shape[1])
    step = max(1, TILE_BLOCK_CELLS // 4 // max(1, h * (2 * w + sinks)))  # float64 windows of at most 128 MB
    sink, local, union = np.zeros(h), np.zeros(h), np.zeros(h)
    for r in range(0, n, step):
        rows = slice(r, min(n, r + step))
        lo = max(0, r - w + 1)
        q_pos = torch.arange(rows.start, rows.stop)[:, None]
        k_pos = torch.arange(lo, rows.stop)[None, :]
        near = (k_pos <= q_pos) & (k_pos > q_pos - w)  # [r, c]
        band = _window(call, lse, rows, slice(lo, rows.stop)).double() * near  # [h, r, c]: the last w keys
        first = _window(call, lse, rows, slice(0, min(sinks, n_k))).double().sum((-1, -2)).numpy()  # [h]
        local += band.sum((-1, -2)).numpy()
        sink += first
        union += first + band.sum((-1, -2)).numpy() - band[..., k_pos[0] < sinks].sum((-1, -2)).numpy()
    last = slice(max(0, n - LONG_LAST_ROWS), n)
    vs = rules.vertical_slash_recall(_window(call, lse, last, slice(0, n_k)).double().numpy(), last.start)
    tiles, f = call.tiles, call.tile_f
    if tiles is None:
        f = pool_factor(n, n_k, tile_cells)
        tiles = pooled(call.q, call.k, lse, f, call.scaling, call.softcap, call.bias, _allowed(call),
                       call.sink is not None).numpy()  # fmt: skip
    return np.stack([sink / n, local / n, union / n, vs, rules.block_sparse_recall(tiles, f, n, n_k)])


def head_shares(lm: LoadedModel, ids: torch.Tensor, tile_cells: int = 256) -> Shares:
    """Every decoder layer's shares from one pass, tiled when long (door.run: the model's own attention, recorded).
    Shapes: ids [1, n] long."""
    kept = {"extras": False, "tile_cells": tile_cells, "tile_block": TILE_BLOCK_CELLS, "hidden_states": False}
    run = door.run(lm, ids, **kept)
    part = lm.part(None)
    got = np.stack([layer_shares(run.calls[(part, i)], tile_cells) for i in range(lm.n_layers(part))])  # [L, 5, H]
    return Shares(sink=got[:, 0], local=got[:, 1], recalls=np.moveaxis(got[:, 2:], 1, -1))


@dataclass(frozen=True)
class Needle:
    """A needle sentence, the answer the model should copy (its last word unless given) and the cue that asks for
    it (the needle's words before the answer)."""

    sentence: str = NEEDLE
    answer: str = ""

    @property
    def word(self) -> str:
        return self.answer.strip() or self.sentence.strip().rstrip(".!?").split()[-1]

    @property
    def cue(self) -> str:
        at = self.sentence.rfind(self.word)
        if at <= 0:
            raise MhaVizError(f"the answer {self.word!r} must come after some words of the needle sentence")
        return self.sentence[:at].rstrip()


def prompt_at(lm: LoadedModel, body: Sequence[int], needle: Needle, depth: float) -> tuple[torch.Tensor, slice]:
    """The text's token ids with the needle inserted at ``depth`` (0…1) and the cue at the end, and where the
    answer's tokens sit. Shapes: returns ids [1, n] long, the answer's slice of positions."""
    tok = lm.tokenizer
    at = round(depth * len(body))
    ends = [
        i + 1 for i in range(at, min(len(body), at + 64)) if tok.decode([body[i]]).rstrip(" ").endswith((".", "\n"))
    ]
    at = ends[0] if ends else at  # after the next sentence's end when there is one near
    before = tok(" " + needle.sentence[: needle.sentence.rfind(needle.word)].strip(), add_special_tokens=False)
    word = tok(" " + needle.word, add_special_tokens=False)["input_ids"]
    after = tok(needle.sentence[needle.sentence.rfind(needle.word) + len(needle.word) :], add_special_tokens=False)
    cue = tok("\n" + needle.cue, add_special_tokens=False)["input_ids"]
    head = ([tok.bos_token_id] if tok.bos_token_id is not None else []) + list(body[:at]) + before["input_ids"]
    ids = head + word + after["input_ids"] + list(body[at:]) + cue
    return torch.tensor([ids]), slice(len(head), len(head) + len(word))


def needle_runs(
    lm: LoadedModel, body: Sequence[int], needle: Needle, depths: Sequence[float],
    masked: Sequence[tuple[int, int]] = (),
) -> tuple[list[str], list[np.ndarray], list[int]]:  # fmt: skip
    """Greedy generations with the needle at each depth, the heads ``masked`` (layer, head) zeroed in every pass:
    (the generated texts, each generation's retrieval hits [L, H], the answer's token counts)."""
    part = lm.part(None)
    by_layer: dict[int, list[int]] = {}
    for layer, head in masked:
        by_layer.setdefault(int(layer), []).append(int(head))
    steps = [door.Ablate(part, la, tuple(hs)) for la, hs in sorted(by_layer.items())]
    texts, hits, lengths = [], [], []
    for depth in depths:
        ids, span = prompt_at(lm, body, needle, depth)
        got = door.generate(lm, ids, span.stop - span.start + 2, steps)
        texts.append(lm.tokenizer.decode(got.ids.tolist()))
        hits.append(rules.retrieval_hits(got.top.numpy(), got.ids.numpy(), ids[0].numpy(), span))
        lengths.append(span.stop - span.start)
    return texts, hits, lengths


@dataclass(frozen=True)
class LongHeads:
    """The study's result. Shapes: shares' arrays and retrieval [L, H]; kinds and patterns [L, H] str; recall: the
    share of depths whose generation holds the answer, with no head masked, the top-k retrieval heads masked and k
    random heads masked; texts: those generations by the same keys."""

    tokens: int
    shares: Shares
    retrieval: np.ndarray
    kinds: np.ndarray
    patterns: np.ndarray
    recall: dict[str, float]
    masked: dict[str, list[tuple[int, int]]]
    texts: dict[str, list[str]]


def study(
    lm: LoadedModel, text: str, needle: Needle = Needle(), depths: Sequence[float] = DEPTHS, k: int = 8,
    seed: int = 0, max_tokens: int | None = None,
) -> LongHeads:  # fmt: skip
    """The whole study on ``text`` (cut so that the needle, the cue and the answer fit ``max_tokens``, the model's
    window by default)."""
    if lm.part(None) != "decoder" or not lm.causal_lm:
        raise MhaVizError(f"{lm.name} is not a decoder-only language model: the heads at length need one")
    if not 0 < k <= lm.n_heads * lm.n_layers(lm.part(None)):
        raise MhaVizError(f"k must be 1 to {lm.n_heads * lm.n_layers(lm.part(None))} heads")
    if any(not 0.0 <= d <= 1.0 for d in depths) or not depths:
        raise MhaVizError("each needle depth must be between 0 and 1")
    limit = min(lm.max_tokens, max_tokens or lm.max_tokens)
    extra = len(prompt_at(lm, [], needle, 0.0)[0][0]) + len(lm.tokenizer(" " + needle.word)["input_ids"]) + 2
    body = lm.tokenizer(text, add_special_tokens=False)["input_ids"][: max(0, limit - extra)]
    if len(body) < 16:
        raise MhaVizError("the text is too short for a needle test: give at least a few sentences")
    ids = torch.tensor([([lm.tokenizer.bos_token_id] if lm.tokenizer.bos_token_id is not None else []) + body])
    shares = head_shares(lm, ids)
    texts, hits, lengths = needle_runs(lm, body, needle, depths)
    retrieval = rules.retrieval_score(hits, lengths)
    n_layers, n_heads = retrieval.shape
    order = np.argsort(-retrieval, axis=None, kind="stable")[:k]
    top = [(int(i // n_heads), int(i % n_heads)) for i in order]
    rng = np.random.default_rng(seed)
    rand = [(int(i // n_heads), int(i % n_heads)) for i in rng.choice(n_layers * n_heads, size=k, replace=False)]
    masked = {"none": [], "top-k retrieval": top, "k random": rand}
    runs = {"none": texts, **{name: needle_runs(lm, body, needle, depths, heads)[0] for name, heads in
                              list(masked.items())[1:]}}  # fmt: skip
    return LongHeads(
        tokens=int(ids.shape[-1]), shares=shares, retrieval=retrieval,
        kinds=rules.duo_kind(shares.recalls[..., 0], retrieval), patterns=rules.pattern_kind(shares.recalls),
        recall={name: rules.recall(got, needle.word) for name, got in runs.items()}, masked=masked, texts=runs,
    )  # fmt: skip

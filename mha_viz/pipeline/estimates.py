"""What each dashboard view holds at its peak and the work it does, from the sizes of its input (Sizes -> Cost).

One estimate per view (ESTIMATES; tests/test_budget_views.py checks it against the registry). The memory estimates
count the arrays a step holds at its peak and are deliberately simple and on the high side; budget.py adds the
margin, turns work into seconds and refuses what is over the limits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mha_viz.config import (
    CORPUS_BATCH,
    LENS_POSITIONS,
    LONG_GRID_CELLS,
    LONG_MAP_CELLS,
    MAX_CORPUS_TEXTS,
    MAX_PATCH_BATCH,
    MAX_ZOOM_SIDE,
    PATCH_OUTPUT_BYTES,
    TILE_BLOCK_CELLS,
)

F32 = 4
F64 = 8
LENS_CHUNK_BYTES = 2**26  # the lens holds at most this much per chunk of positions: logits f32 + softmax f64


@dataclass(frozen=True)
class Sizes:
    """The sizes that decide what a request costs."""

    n_q: int  # query tokens
    n_k: int  # key tokens
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    n_layers: int = 1
    vocab: int = 0  # the LM head's rows (0: no LM head)

    def trace_bytes(self, heads: int | None = None) -> int:
        """One layer's trace: q, z; k, v; scores and pattern; x, concat, output."""
        h = heads or self.n_heads
        dh = self.n_heads * self.d_head // h
        kv = self.n_kv_heads if heads is None else h
        return F32 * (
            2 * h * self.n_q * dh + 2 * kv * self.n_k * dh + 2 * h * self.n_q * self.n_k + 3 * self.n_q * self.d_model
        )

    def recording_bytes(self) -> int:
        """One recorded model pass: every layer's q, k, v, X, W^O in/out, mask, plus the model's own weights
        and our recomputation of one layer at a time."""
        per_layer = F32 * (
            self.n_heads * self.n_q * self.d_head + 2 * self.n_kv_heads * self.n_k * self.d_head
            + 3 * self.n_q * self.d_model
        ) + self.n_q * self.n_k  # fmt: skip
        return self.n_layers * per_layer + 3 * F32 * self.n_heads * self.n_q * self.n_k

    def pass_bytes(self, logit_rows: int | None = None) -> int:
        """What one model pass holds besides the recording: one layer's attention weights and MLP at a time,
        the hidden state of every layer (output_hidden_states) and the logits of ``logit_rows`` positions
        (None: every position)."""
        n = self.n_q
        rows = n if logit_rows is None else logit_rows
        return F32 * (
            3 * self.n_heads * n * self.n_k + 12 * n * self.d_model + (self.n_layers + 1) * n * self.d_model
            + rows * self.vocab
        )  # fmt: skip

    # floating-point work, in GFLOP
    def trace_gflop(self) -> float:
        """One layer's trace: Q, K, V projections, scores and z, each head's output after W^O, the output."""
        n, m, d, hd = self.n_q, self.n_k, self.d_model, self.n_heads * self.d_head
        kvd = self.n_kv_heads * self.d_head
        return 2 * (n * d * hd + 2 * m * d * kvd + 2 * self.n_heads * n * m * self.d_head + 2 * n * hd * d) / 1e9

    def pass_gflop(self) -> float:
        """One model pass: ~12 d² weights per layer (attention 4 d², MLP 8 d²), the attention itself, the LM head."""
        n, d = self.n_q, self.d_model
        return (self.n_layers * (24 * n * d * d + 4 * n * self.n_k * d) + 2 * n * d * self.vocab) / 1e9

    def lens_positions(self) -> int:
        """Positions the Next token view's logit lens reads (the last LENS_POSITIONS and the chosen one)."""
        return min(self.n_q, LENS_POSITIONS + 1)


@dataclass(frozen=True)
class Cost:
    """What a view holds at its peak (bytes, before the margin), its floating-point work (GFLOP) and the
    heatmap cells it draws."""

    peak: int
    gflop: float
    cells: int = 0


def _grid_cells(s: Sizes) -> int:
    return s.n_heads * min(s.n_q, 128) * min(s.n_k, 128)


def _one_layer(s: Sizes) -> Cost:  # Heads, Step by step, Lesson, Lines, and the CLI's one-layer trace
    grid = F32 * _grid_cells(s) * 3  # pooled panels, as figure data
    return Cost(s.trace_bytes() + grid + 3 * F32 * s.n_q * s.n_k, s.trace_gflop(), _grid_cells(s))


def _rows(s: Sizes) -> int:
    return F32 * s.n_layers * s.n_heads * s.n_k  # one query row per layer × head (mha_viz.pipeline.rows)


def _every_layer_rows(s: Sizes) -> Cost:  # Overview, Where does it look?: layer by layer, then one layer
    grid = F32 * _grid_cells(s) * 3
    return Cost(s.trace_bytes() + _rows(s) + 3 * F32 * 2**23 + grid, s.n_layers * s.trace_gflop(), _grid_cells(s))
    # 2**23: rows.CHUNK_CELLS


def _every_layer_patterns(s: Sizes) -> Cost:  # Head roles, Rollout: every layer's pattern at once
    pattern = F32 * s.n_heads * s.n_q * s.n_k
    return Cost(s.n_layers * pattern + s.trace_bytes(), s.n_layers * s.trace_gflop(), s.n_q * s.n_k)


def _two_sentences(s: Sizes) -> Cost:  # the focus rows of both texts, then one layer's trace of each
    return Cost(2 * (s.trace_bytes() + _rows(s)), 2 * (s.pass_gflop() + s.n_layers * s.trace_gflop()),
                2 * _grid_cells(s))  # fmt: skip


def _head_count(s: Sizes) -> Cost:
    heads = min(64, s.n_heads * s.d_head)
    grid = F32 * _grid_cells(s) * 3
    return Cost(2 * s.trace_bytes() + s.trace_bytes(heads=heads) + grid, 3 * s.trace_gflop(), 2 * _grid_cells(s))


def _wo(s: Sizes) -> Cost:
    """Two traces (W^O and its variant; a random orthogonal W^O is a QR of d_model²), every head's output
    after W^O, and W^O itself drawn as one heatmap (d_model × heads·d_head cells)."""
    hd = s.n_heads * s.d_head
    wo_cells = s.d_model * hd
    qr = 4 * s.d_model**3 / 3e9
    return Cost(2 * s.trace_bytes() + 2 * F32 * s.n_q * s.d_model + 3 * F32 * wo_cells,
                2 * s.trace_gflop() + qr + 2 * s.n_heads * s.n_q * s.d_model * 3 / 1e9, wo_cells)  # fmt: skip


def _compare(s: Sizes) -> Cost:
    pattern = F32 * s.n_heads * s.n_q * s.n_k
    js = 20 * s.n_heads**2 * s.n_q * s.n_k / 1e9  # Jensen-Shannon between every two heads' rows
    return Cost(2 * s.trace_bytes() + 3 * pattern // max(s.n_heads, 1) + F32 * s.n_heads**2, s.trace_gflop() + js,
                s.n_heads**2 + _grid_cells(s))  # fmt: skip


def _ablation(s: Sizes) -> Cost:
    pattern = F32 * s.n_heads * s.n_q * s.n_k
    return Cost(2 * (pattern + 12 * F32 * s.n_q * s.d_model), 2 * s.pass_gflop() + 2 * s.trace_gflop(),
                _grid_cells(s))  # fmt: skip


def _masks(s: Sizes) -> Cost:  # one layer, and the same text padded in a batch of two (mha_viz.studies.padding)
    one = _one_layer(s)
    return Cost(one.peak + 2 * s.recording_bytes(), one.gflop + 2 * s.pass_gflop(), one.cells)


def _importance(s: Sizes) -> Cost:
    """One model pass per head with that head removed (one at a time), the loss over the vocabulary in f64."""
    return Cost(s.pass_bytes() + F64 * s.n_q * s.vocab, s.n_layers * s.n_heads * s.pass_gflop(),
                s.n_layers * s.n_heads)  # fmt: skip


PATCH_PASS_BYTES = 2**29  # a batch of patched runs holds at most this much of the model's activations


def patch_batch(s: Sizes) -> int:
    """Patched runs per forward pass (mha_viz.studies.patching): at most MAX_PATCH_BATCH, at most PATCH_OUTPUT_BYTES
    of logits or hidden states, and at most PATCH_PASS_BYTES of activations (a long text's batch is smaller, not
    refused)."""
    width = s.vocab or s.d_model
    by_output = PATCH_OUTPUT_BYTES // (F32 * s.n_q * width)
    return max(1, min(MAX_PATCH_BATCH, by_output, PATCH_PASS_BYTES // max(1, s.pass_bytes(logit_rows=0))))


def _patching(s: Sizes) -> Cost:
    """Activation patching (mha_viz.studies.patching): the clean run's activations, then one patched run per head,
    ``patch_batch`` runs a pass."""
    width = s.vocab or s.d_model
    batch = patch_batch(s)
    return Cost(s.recording_bytes() + batch * (s.pass_bytes(logit_rows=0) + F32 * s.n_q * width),
                (s.n_layers * s.n_heads + 2) * s.pass_gflop(), s.n_layers * s.n_heads)  # fmt: skip


def _variants(s: Sizes) -> Cost:
    """studies.variants: the whole model run once per (grouping, K/V head count) (two groupings, every divisor of the
    K/V head count) and once recorded for every layer's keys and values (aligned groups); then the chosen layer's
    pattern before and after, drawn as two panels per head; then mha_viz.studies.collab's what-if: two passes per rank
    (collab.FRACTIONS, 6) and the SVDs of the concatenated projections (small next to a pass)."""
    counts = sum(1 for g in range(1, s.n_kv_heads + 1) if s.n_kv_heads % g == 0)
    kv = 2 * F32 * s.n_layers * s.n_kv_heads * s.n_k * s.d_head  # every layer's k and v, kept for the similarities
    pattern = F32 * s.n_heads * s.n_q * s.n_k
    return Cost(s.pass_bytes() + kv + 3 * pattern + F64 * s.n_q * s.vocab, (2 * counts + 3 + 2 * 6) * s.pass_gflop(),
                2 * _grid_cells(s))  # fmt: skip


def _circuits(s: Sizes) -> Cost:
    """Weights only: the LM head (or embeddings) read in f64 against what a head writes, one head at a time."""
    vocab = s.vocab or 32_000
    return Cost(2 * F64 * vocab * s.d_model + F64 * 64 * vocab + s.trace_bytes(),
                s.n_heads * 2 * 64 * s.d_model * vocab / 1e9, s.n_layers * s.n_heads)  # fmt: skip


def _next_token(s: Sizes) -> Cost:
    """On top of the page's recorded pass (held already): one model pass with the residual stream kept (every
    layer's [pos, d_model], stacked: twice) and the logits of the chosen position only (logits_to_keep), the
    direct logit attribution (one layer's trace at a time, every head's output at one position), and the logit
    lens over at most LENS_POSITIONS + 1 positions in chunks of LENS_CHUNK_BYTES: [chunk, vocab] f32 logits
    and f64 softmax, never [layers × positions × vocab]."""
    resid = F32 * (s.n_layers + 1) * s.n_q * s.d_model  # the stacked stream, kept to the end
    lens = min(LENS_CHUNK_BYTES, 20 * s.lens_positions() * s.vocab) + 12 * s.n_layers * s.lens_positions()
    attribution = s.trace_bytes() + F64 * s.n_layers * s.n_heads * s.d_model
    peak = resid + max(s.pass_bytes(logit_rows=1) + resid, attribution, lens)  # the pass, then one step at a time
    lens_gflop = s.n_layers * s.lens_positions() * s.vocab * (2 * s.d_model + 40) / 1e9  # LM head + softmax
    return Cost(peak, s.pass_gflop() + s.n_layers * s.trace_gflop() + lens_gflop,
                s.n_layers * (s.n_heads + min(s.n_q, LENS_POSITIONS)))  # fmt: skip


def _induction(s: Sizes) -> Cost:
    """mha_viz.studies.induction's own estimate: a recorded pass over 2 N + 1 tokens, its logits, one layer at a time.
    The caller passes the repeated sequence's length as n_q, n_k."""
    one = _one_layer(s)
    return Cost(one.peak + s.recording_bytes() + 2 * F32 * s.n_q * s.vocab,
                s.pass_gflop() + s.n_layers * s.trace_gflop(), s.n_layers * s.n_heads + s.n_q * s.n_k)  # fmt: skip


def _corpus(s: Sizes) -> Cost:
    """studies.corpus_run: a padded batch of CORPUS_BATCH texts recorded at once, one text's every-layer patterns
    at a time, and 10 scores per head kept for each of at most MAX_CORPUS_TEXTS texts; the time of CORPUS_BATCH
    texts (budget.corpus_estimate sums it over a run's batches). Drawn: three layer × head maps and a line chart."""
    heads = s.n_layers * s.n_heads
    patterns = F32 * heads * s.n_q * s.n_k
    kept = F32 * 10 * heads * MAX_CORPUS_TEXTS
    return Cost(CORPUS_BATCH * s.recording_bytes() + patterns + s.trace_bytes() + kept,
                CORPUS_BATCH * (s.pass_gflop() + s.n_layers * s.trace_gflop()), 3 * heads)  # fmt: skip


def _why(s: Sizes) -> Cost:  # the layer's trace (the default keys), one pass, sources at 3 tokens only (float64)
    sources = 4 * F64 * 3 * s.n_layers * (s.n_heads + 4) * max(s.d_model, s.n_heads * s.d_head)
    return Cost(s.trace_bytes() + s.pass_bytes(logit_rows=1) + sources, s.pass_gflop() + s.trace_gflop(), 24 * 24)


def _kv(s: Sizes) -> Cost:
    """studies.kv_lens: one recorded pass (every layer's q and k) read a chunk of rows at a time into four [L, H, n]
    float64 sums, then one pass with a cache mask per layer (its [h, n, n] mask and the additive one, one layer at a
    time) and the LM head on the continuation's rows in f64; the strips are L · kv · n cells."""
    stats = 4 * F64 * s.n_layers * s.n_heads * s.n_k
    mask = (1 + F32) * s.n_heads * s.n_q * s.n_k
    return Cost(s.recording_bytes() + stats + s.pass_bytes() + mask + F64 * s.n_q * s.vocab,
                2 * s.pass_gflop() + s.n_layers * s.trace_gflop(), s.n_layers * s.n_kv_heads * s.n_k)  # fmt: skip


def _pooled_layer(s: Sizes) -> Cost:
    """One layer's pooled exact maps from its recorded q, k and row statistics (tiles.pooled): blocks of at most
    TILE_BLOCK_CELLS scores (three copies: scores, mask, weights), never a whole [h, n, n]; each head's scores once."""
    maps = F32 * s.n_heads * (LONG_MAP_CELLS**2 + LONG_GRID_CELLS**2 + MAX_ZOOM_SIDE**2)  # map, grid cell, zoom
    return Cost(3 * F32 * TILE_BLOCK_CELLS + maps + _rows(s), s.trace_gflop(), s.n_heads * LONG_GRID_CELLS**2)


def _heads_at_length(s: Sizes) -> Cost:  # Heads beyond LONG_VIEW_FROM tokens: the shown layer's pooled maps, a zoom
    return _pooled_layer(s)


def _overview_at_length(s: Sizes) -> Cost:  # Overview beyond LONG_VIEW_FROM: every layer's pooled maps, one at a time
    one = _pooled_layer(s)
    return Cost(one.peak + F32 * s.n_layers * s.n_heads * LONG_GRID_CELLS**2, s.n_layers * one.gflop, one.cells)


AT_LENGTH: dict[str, Callable[[Sizes], Cost]] = {"Heads": _heads_at_length, "Overview": _overview_at_length}
# views drawn as pooled exact maps from a slim (tiled) recording past LONG_VIEW_FROM tokens (ui/request.py)

ESTIMATES: dict[str, Callable[[Sizes], Cost]] = {
    "Lesson": _one_layer,
    "Heads": _one_layer,
    "Lines": _one_layer,
    "Compare heads": _compare,
    "Head roles": _every_layer_patterns,
    "Where does it look?": _every_layer_rows,
    "Two sentences": _two_sentences,
    "Head count": _head_count,
    "W^O": _wo,
    "Masks": _masks,
    "Ablation": _ablation,
    "Head importance": _importance,
    "Variants": _variants,
    "Patching": _patching,
    "Circuits": _circuits,
    "Rollout": _every_layer_patterns,
    "Step by step": _one_layer,
    "Overview": _every_layer_rows,
    "Next token": _next_token,
    "Induction": _induction,
    "Corpus": _corpus,
    "Why?": _why,
    "KV cache": _kv,
}  # one entry per dashboard view (tests/test_budget_views.py checks ui.VIEW_FUNCS against it)

"""Every request has a budget: its memory and, in hosted mode, its time are estimated from its sizes before
anything is computed.

A request over a limit is refused with a message that says the limit and what to lower. Limits come from
environment variables (hosted mode, see mha_viz.config.hosted, has tighter defaults):

    MHA_VIZ_MAX_REQUEST_MB   memory one request may use (default 2048; hosted 768)
    MHA_VIZ_MAX_GRID_HEADS   heads drawn as one grid of heatmaps (default 64; hosted 32)
    MHA_VIZ_MAX_REQUEST_S    server time one request may take (default: no limit; hosted 30 s): estimated
                             before it runs (seconds()), and a running request is cut when it passes it
                             (deadline() / check_deadline())

Every dashboard view has its own estimate (ESTIMATES, one entry per view: what it holds at its peak, the
work it does); the memory estimates count the arrays a step holds at its peak (with a margin for
temporaries) and are deliberately simple and on the high side. The time model counts floating-point work and
heatmap cells drawn, at rates measured on a 2-core CPU (benchmarks/bench_view_cost.py; see the constants).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mha_viz.config import CORPUS_BATCH, MAX_CORPUS_TEXTS, MAX_PATCH_BATCH, PATCH_OUTPUT_BYTES, hosted
from mha_viz.trace import MhaVizError

F32 = 4
F64 = 8
MARGIN = 1.5  # temporaries (softmax, copies to the CPU, figure building)
SLACK = 2**24  # and 16 MB a request for Python objects and the allocator's slack
LENS_POSITIONS = 64  # the Next token view runs the logit lens on at most this many positions (the last ones)
LENS_CHUNK_BYTES = 2**26  # the lens holds at most this much per chunk of positions: logits f32 + softmax f64

# --- the time model: rates measured with benchmarks/bench_view_cost.py on this project's 2-core CI machine ---
# (torch 2.13 CPU, 2 threads; MiniLM and SmolLM2-135M). Rough on purpose: a request is refused when the
# estimate is over the limit, and cut by the deadline if it runs over anyway.
SECONDS_PER_GFLOP = 0.03  # float32 work of a page (SmolLM2's Next token, 1,187 tokens: 687 GFLOP in 33 s of
# CPU on 2 threads, 0.024 s a GFLOP of wall time on an idle machine; main's lens: 2,659 GFLOP in 93 s of CPU)
SECONDS_PER_MCELL = 1.0  # one million heatmap cells turned into a figure and sent (measured 0.4-0.8 s)
SECONDS_BASE = 0.5  # the page itself: widgets, tables, one small figure


def env_int(name: str, default: int) -> int:
    """A positive whole number from the environment (plain ASCII digits), else ``default``."""
    raw = os.environ.get(name, "").strip()
    value = int(raw) if raw.isascii() and raw.isdigit() else 0
    return value if value > 0 else default


def max_request_mb() -> int:
    return env_int("MHA_VIZ_MAX_REQUEST_MB", 768 if hosted() else 2048)


def max_grid_heads() -> int:
    return env_int("MHA_VIZ_MAX_GRID_HEADS", 32 if hosted() else 64)


def max_request_s() -> float | None:
    """Server time one request may take (None: no limit, the default outside hosted mode)."""
    value = env_int("MHA_VIZ_MAX_REQUEST_S", 0)
    return float(value) if value else (30.0 if hosted() else None)


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
    texts (corpus_seconds scales it to a run's count). Drawn: three layer × head maps and a line chart."""
    heads = s.n_layers * s.n_heads
    patterns = F32 * heads * s.n_q * s.n_k
    kept = F32 * 10 * heads * MAX_CORPUS_TEXTS
    return Cost(CORPUS_BATCH * s.recording_bytes() + patterns + s.trace_bytes() + kept,
                CORPUS_BATCH * (s.pass_gflop() + s.n_layers * s.trace_gflop()), 3 * heads)  # fmt: skip


def corpus_seconds(s: Sizes, n_texts: int) -> float:
    """Estimated server time of a Corpus run over ``n_texts`` texts of about the page text's length."""
    return SECONDS_BASE + (seconds("Corpus", s) - SECONDS_BASE) * n_texts / CORPUS_BATCH


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
}  # one entry per dashboard view (tests/test_budget_views.py checks ui.VIEW_FUNCS against it)


def cost(view: str, s: Sizes) -> Cost:
    try:
        return ESTIMATES[view](s)
    except KeyError:
        raise KeyError(
            f"no budget estimate for the view {view!r}: add one to mha_viz.pipeline.budget.ESTIMATES"
        ) from None


def estimate(view: str, s: Sizes) -> int:
    """Estimated peak bytes of one view (on top of the loaded model)."""
    return int(MARGIN * cost(view, s).peak) + SLACK


def seconds(view: str, s: Sizes) -> float:
    """Estimated server time of one view (the time model above)."""
    c = cost(view, s)
    return SECONDS_BASE + SECONDS_PER_GFLOP * c.gflop + SECONDS_PER_MCELL * c.cells / 1e6


def check(view: str, s: Sizes, recording: bool = False, what: str | None = None) -> None:
    """Refuse a request whose estimated memory is over the limit, saying what to lower.

    ``view`` picks the estimate (a dashboard tab's name); ``what`` names the step in the message."""
    need = estimate(view, s) + (s.recording_bytes() if recording else 0)
    limit = max_request_mb() * 2**20
    if need > limit:
        raise MhaVizError(
            f"{what or view} on this input would need about {need / 2**20:,.0f} MB; the limit per request is "
            f"{limit / 2**20:,.0f} MB (MHA_VIZ_MAX_REQUEST_MB). Use a shorter text, fewer heads or a smaller d_model"
            f"{', or a view of one layer' if s.n_layers > 1 else ''}"
        )


def check_time(view: str, s: Sizes, what: str | None = None) -> float:
    """Refuse a request whose estimated server time is over MHA_VIZ_MAX_REQUEST_S (hosted mode: 30 s).
    Returns the estimate (seconds)."""
    need, limit = seconds(view, s), max_request_s()
    if limit is not None and need > limit:
        raise MhaVizError(
            f"{what or view} on this input would take about {need:,.0f} s of server time; the limit per request on "
            f"this server is {limit:,.0f} s (MHA_VIZ_MAX_REQUEST_S). Use a shorter text, fewer heads or a smaller "
            f"d_model{', or a smaller model' if s.n_layers > 1 else ''}"
        )
    return need


def check_grid(n_heads: int) -> None:
    """Refuse to draw more heads as one grid than the limit (each is a heatmap to lay out and send)."""
    limit = max_grid_heads()
    if n_heads > limit:
        raise MhaVizError(
            f"{n_heads} heads are too many to draw as one grid; the limit is {limit} (MHA_VIZ_MAX_GRID_HEADS). "
            "Choose fewer heads, or open single heads in Step by step"
        )


# --- the deadline of the request running in this thread ------------------------------------------------------
_LOCAL = threading.local()  # .deadline: (monotonic end, limit s, what) or None


@contextmanager
def deadline(limit_s: float | None, what: str) -> Iterator[None]:
    """Cut the work of this thread after ``limit_s`` seconds (None: no deadline): check_deadline(), called
    between heavy steps, raises MhaVizError once it has passed. Nested deadlines keep the earliest."""
    previous = getattr(_LOCAL, "deadline", None)
    mine = None if limit_s is None else (time.monotonic() + limit_s, limit_s, what)
    _LOCAL.deadline = mine if previous is None or (mine is not None and mine[0] < previous[0]) else previous
    try:
        yield
    finally:
        _LOCAL.deadline = previous


def check_deadline() -> None:
    """Raise MhaVizError when the request running in this thread has passed its deadline (a few hundred
    nanoseconds when it has not: call it per layer, per chunk, per module)."""
    current = getattr(_LOCAL, "deadline", None)
    if current is not None and time.monotonic() >= current[0]:
        _LOCAL.deadline = None  # said once: what runs after the message (cleanup, drawing the error) is not cut
        raise MhaVizError(
            f"{current[2]} was stopped after {current[1]:,.0f} s of server time, the limit per request on this "
            "server (MHA_VIZ_MAX_REQUEST_S). Use a shorter text, fewer heads or a smaller model"
        )

"""Every request has a budget: its memory and, in hosted mode, its time are estimated from its sizes before
anything is computed.

A request over a limit is refused with a message that says the limit and what to lower. Limits come from
environment variables (hosted mode, see mha_viz.config.hosted, has tighter defaults):

    MHA_VIZ_MAX_REQUEST_MB   memory one request may use (default 2048; hosted 768)
    MHA_VIZ_MAX_GRID_HEADS   heads drawn as one grid of heatmaps (default 64; hosted 32)
    MHA_VIZ_MAX_REQUEST_S    server time one request may take (default: no limit; hosted 30 s): estimated
                             before it runs (seconds()), and a running request is cut when it passes it
                             (deadline() / check_deadline())

Every dashboard view has its own estimate (estimates.py: what it holds at its peak, the work it does); here it
gets a margin for temporaries. The time model counts floating-point work and
heatmap cells drawn, at rates measured on a 2-core CPU (benchmarks/bench_view_cost.py; see the constants).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from mha_viz.config import CORPUS_BATCH, hosted
from mha_viz.pipeline.estimates import AT_LENGTH, ESTIMATES, Cost, Sizes
from mha_viz.trace import MhaVizError

MARGIN = 1.5  # temporaries (softmax, copies to the CPU, figure building)
SLACK = 2**24  # and 16 MB a request for Python objects and the allocator's slack

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


def corpus_estimate(s: Sizes, lengths: Sequence[int]) -> tuple[int, float]:
    """Estimated peak bytes and server time of a Corpus run over texts of these token counts (issue 35 §4.9: not the
    page text's), in padded batches of CORPUS_BATCH in their order, each as long as its longest text; ``s`` gives
    the model's shape."""
    peak, secs = 0, SECONDS_BASE
    for i in range(0, len(lengths), CORPUS_BATCH):
        batch = lengths[i : i + CORPUS_BATCH]
        one = dataclasses.replace(s, n_q=max(batch), n_k=max(batch))
        peak = max(peak, estimate("Corpus", one))
        secs += (seconds("Corpus", one) - SECONDS_BASE) * len(batch) / CORPUS_BATCH
    return peak, secs


def cost(view: str, s: Sizes, at_length: bool = False) -> Cost:
    """``at_length``: the view drawn as pooled exact maps from a tiled recording (estimates.AT_LENGTH)."""
    try:
        return (AT_LENGTH if at_length and view in AT_LENGTH else ESTIMATES)[view](s)
    except KeyError:
        raise KeyError(
            f"no budget estimate for the view {view!r}: add one to mha_viz.pipeline.estimates.ESTIMATES"
        ) from None


def estimate(view: str, s: Sizes, at_length: bool = False) -> int:
    """Estimated peak bytes of one view (on top of the loaded model)."""
    return int(MARGIN * cost(view, s, at_length).peak) + SLACK


def seconds(view: str, s: Sizes, at_length: bool = False) -> float:
    """Estimated server time of one view (the time model above)."""
    c = cost(view, s, at_length)
    return SECONDS_BASE + SECONDS_PER_GFLOP * c.gflop + SECONDS_PER_MCELL * c.cells / 1e6


def recording_estimate(s: Sizes) -> int:
    """Estimated bytes of the recorded model pass every view reads, with the one-layer trace drawn from it (what
    check(..., recording=True) holds to the per-request limit, and what the pass holds in the process budget)."""
    return estimate("Heads", s) + s.recording_bytes()


def recording_seconds(s: Sizes) -> float:
    """Estimated server time of the recorded model pass: the model's work (its LM head over ``s.vocab`` rows at every
    position: pass 0 where only the last position's logits are computed, a long text's slim recording) and the
    self-check of every recorded call (each head's scores recomputed)."""
    check = s.n_layers * 2 * s.n_heads * s.n_q * s.n_k * s.d_head / 1e9
    return SECONDS_BASE + SECONDS_PER_GFLOP * (s.pass_gflop() + check)


def check(view: str, s: Sizes, recording: bool = False, what: str | None = None, at_length: bool = False) -> None:
    """Refuse a request whose estimated memory is over the limit, saying what to lower.

    ``view`` picks the estimate (a dashboard tab's name); ``what`` names the step in the message."""
    check_bytes(estimate(view, s, at_length) + (s.recording_bytes() if recording else 0), what or view, s)


def check_bytes(need: int, what: str, s: Sizes) -> None:
    """Refuse ``need`` bytes over MHA_VIZ_MAX_REQUEST_MB, naming ``what`` and what to lower."""
    limit = max_request_mb() * 2**20
    if need > limit:
        raise MhaVizError(
            f"{what} on this input would need about {need / 2**20:,.0f} MB; the limit per request is "
            f"{limit / 2**20:,.0f} MB (MHA_VIZ_MAX_REQUEST_MB). Use a shorter text, fewer heads or a smaller d_model"
            f"{', or a view of one layer' if s.n_layers > 1 else ''}"
        )


def check_time(view: str, s: Sizes, what: str | None = None, at_length: bool = False) -> float:
    """Refuse a request whose estimated server time is over MHA_VIZ_MAX_REQUEST_S (hosted mode: 30 s).
    Returns the estimate (seconds)."""
    return check_seconds(seconds(view, s, at_length), what or view, s)


def check_seconds(need: float, what: str, s: Sizes) -> float:
    """Refuse ``need`` seconds of server time over MHA_VIZ_MAX_REQUEST_S, naming ``what``; returns ``need``."""
    limit = max_request_s()
    if limit is not None and need > limit:
        raise MhaVizError(
            f"{what} on this input would take about {need:,.{0 if need >= 10 else 1}f} s of server time; the limit "
            f"per request on this server is {limit:,.0f} s (MHA_VIZ_MAX_REQUEST_S). Use a shorter text, fewer heads "
            f"or a smaller d_model{', or a smaller model' if s.n_layers > 1 else ''}"
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

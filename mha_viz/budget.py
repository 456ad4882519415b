"""Every request has a budget: its memory is estimated from its sizes before anything is computed.

A request over the limit is refused with a message that says the limit and what to lower. Limits come from
environment variables (hosted mode, see mha_viz.config.hosted, has tighter defaults):

    MHA_VIZ_MAX_REQUEST_MB   memory one request may use (default 2048; hosted 768)
    MHA_VIZ_MAX_GRID_HEADS   heads drawn as one grid of heatmaps (default 64; hosted 32)

The estimates count the float32 arrays a step holds at its peak (with a margin for temporaries); they are
deliberately simple and on the high side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mha_viz.config import hosted
from mha_viz.trace import MhaVizError

F32 = 4
MARGIN = 1.5  # temporaries (softmax, copies to the CPU, figure building)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        return default
    return value if value > 0 else default


def max_request_mb() -> int:
    return _env_int("MHA_VIZ_MAX_REQUEST_MB", 768 if hosted() else 2048)


def max_grid_heads() -> int:
    return _env_int("MHA_VIZ_MAX_GRID_HEADS", 32 if hosted() else 64)


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


def estimate(view: str, s: Sizes) -> int:
    """Estimated peak bytes of one view (on top of the loaded model)."""
    pattern = F32 * s.n_heads * s.n_q * s.n_k
    grid = F32 * s.n_heads * min(s.n_q, 128) * min(s.n_k, 128) * 3  # pooled panels, as figure data
    rows = F32 * s.n_layers * s.n_heads * s.n_k  # one query row per layer × head (mha_viz.rows)
    if view in ("Overview", "Where does it look?"):  # layer by layer (mha_viz.rows), then one layer's trace
        need = s.trace_bytes() + rows + 3 * F32 * 2**23 + grid  # 2**23: rows.CHUNK_CELLS
    elif view in ("Head roles", "Rollout"):
        need = s.n_layers * pattern + s.trace_bytes()
    elif view == "Two sentences":  # the focus rows of both texts, then one layer's trace of each
        need = 2 * (s.trace_bytes() + rows)
    elif view == "Head count":
        need = 2 * s.trace_bytes() + s.trace_bytes(heads=min(64, s.n_heads * s.d_head)) + grid
    elif view == "W^O":
        need = 2 * s.trace_bytes() + 2 * F32 * s.n_q * s.d_model
    elif view == "Compare heads":
        need = 2 * s.trace_bytes() + 3 * pattern // max(s.n_heads, 1) + F32 * s.n_heads**2
    elif view == "Ablation":
        need = 2 * (pattern + 12 * F32 * s.n_q * s.d_model)
    else:  # Heads, Step by step, and the CLI's one-layer trace
        need = s.trace_bytes() + grid + 3 * F32 * s.n_q * s.n_k
    return int(MARGIN * need)


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


def check_grid(n_heads: int) -> None:
    """Refuse to draw more heads as one grid than the limit (each is a heatmap to lay out and send)."""
    limit = max_grid_heads()
    if n_heads > limit:
        raise MhaVizError(
            f"{n_heads} heads are too many to draw as one grid; the limit is {limit} (MHA_VIZ_MAX_GRID_HEADS). "
            "Choose fewer heads, or open single heads in Step by step"
        )

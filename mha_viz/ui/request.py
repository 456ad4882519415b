"""One view's request: its sizes, its memory and time checked before it runs, its admission against the
process budget while it runs, and its deadline (issue 21 §2.2, §2.6).

    with admitted(name, ctx):   # refused (MhaVizError) over a limit, waits or refused when the server is busy
        view(ctx)               # cut with a MhaVizError when it runs past MHA_VIZ_MAX_REQUEST_S
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from mha_viz.analysis.plans.long_views import is_long
from mha_viz.config import INDUCTION_LENGTH, MAX_INDUCTION_LENGTH, MIN_INDUCTION_LENGTH
from mha_viz.pipeline import budget
from mha_viz.pipeline.admission import ADMISSION
from mha_viz.ui.cache import model_of
from mha_viz.ui.context import Ctx
from mha_viz.ui.guard import stop_if_gone
from mha_viz.ui.pass_budget import vocab_of, watch_deadline

OWN_INPUT = ("Patching", "Corpus")  # views that run on texts of their own (their boxes, a corpus), not the sidebar's


def _induction_tokens() -> int:
    """The Induction view's sequence: BOS and twice the tokens per copy its link or widget asks for."""
    raw = st.session_state.get("ind_length", st.query_params.get("ind_length", ""))
    text = str(raw).strip()
    length = int(text) if text.isascii() and text.isdigit() and len(text) < 6 else INDUCTION_LENGTH
    return 2 * min(max(length, MIN_INDUCTION_LENGTH), MAX_INDUCTION_LENGTH) + 1


def sizes(name: str, ctx: Ctx) -> budget.Sizes:
    """What decides the cost of view ``name`` on this page: the text's tokens, the model's shape, its vocabulary."""
    b = ctx.base
    lm = None if b.own else model_of(ctx.config)
    vocab = 0 if lm is None else vocab_of(lm)
    n_q, n_k = len(b.tokens.ids), len(b.key_tokens.ids)
    if name == "Induction":
        n_q = n_k = _induction_tokens()
    elif name in OWN_INPUT:  # not the sidebar's text: the view estimates its own with own_input()
        n_q = n_k = 1
    return budget.Sizes(n_q, n_k, b.n_heads, b.n_kv_heads, b.d_head, b.d_model, b.n_layers, vocab)


def at_length(name: str, ctx: Ctx, s: budget.Sizes) -> bool:
    """Whether view ``name`` is drawn as pooled exact maps from a tiled recording (Heads and Overview past
    LONG_VIEW_FROM tokens, a model's own weights excepted): its cost is then a block of scores, not [h, n, n]."""
    return name in budget.AT_LENGTH and not ctx.base.own and is_long(s.n_q, s.n_k)


@contextmanager
def admitted(name: str, ctx: Ctx) -> Iterator[budget.Sizes]:
    """Check view ``name``'s memory (MHA_VIZ_MAX_REQUEST_MB) and, where a limit is set, its time
    (MHA_VIZ_MAX_REQUEST_S) before it runs; hold its estimate in the process budget while it runs (waiting a
    moment, or refused, when the server is busy); cut it when it passes the time limit."""
    s = sizes(name, ctx)
    long = at_length(name, ctx, s)
    budget.check(name, s, at_length=long)
    budget.check_time(name, s, at_length=long)
    if not ctx.base.own:
        watch_deadline(model_of(ctx.config))
    need = budget.estimate(name, s, at_length=long)
    with ADMISSION.admit(need, name, poll=stop_if_gone), budget.deadline(budget.max_request_s(), name):
        yield s


@contextmanager
def own_input(
    name: str, ctx: Ctx, s: budget.Sizes, need: int | None = None, secs: float | None = None, what: str | None = None
) -> Iterator[None]:
    """A view's work on its own input (Patching's two texts, a Corpus's texts), which admitted() could not see: it
    estimated the sidebar's text (issue 35 §4.9). The estimate from ``s`` (or ``need`` bytes, ``secs`` seconds) is
    checked against the per-request limits before the work runs, and what it needs beyond the page's estimate is
    held in the process budget while it runs (a moment's wait, or refused, when the server is busy)."""
    what = what or name
    need = budget.estimate(name, s) if need is None else need
    budget.check_bytes(need, what, s)
    budget.check_seconds(budget.seconds(name, s) if secs is None else secs, what, s)
    more = max(0, need - budget.estimate(name, sizes(name, ctx)))
    with ADMISSION.admit(more, what, poll=stop_if_gone):
        yield

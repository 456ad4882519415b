"""One view's request: its sizes, its memory and time checked before it runs, its admission against the
process budget while it runs, and its deadline (issue 21 §2.2, §2.6).

    with admitted(name, ctx):   # refused (MhaVizError) over a limit, waits or refused when the server is busy
        view(ctx)               # cut with a MhaVizError when it runs past MHA_VIZ_MAX_REQUEST_S
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
import torch

from mha_viz.config import INDUCTION_LENGTH, MAX_INDUCTION_LENGTH, MIN_INDUCTION_LENGTH
from mha_viz.pipeline import budget
from mha_viz.pipeline.admission import ADMISSION
from mha_viz.ui.cache import model_of
from mha_viz.ui.context import Ctx
from mha_viz.ui.guard import stop_if_gone

_WATCHED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
_WATCH_LOCK = threading.Lock()


def _deadline_hook(_module: torch.nn.Module, _args: object) -> None:
    budget.check_deadline()


def watch_deadline(lm) -> None:
    """Check the running request's deadline before each attention module of a shared model runs (once per
    layer of a pass: an Ablation or Head importance scan of many passes is cut between two layers). The hook
    reads only this thread's deadline; no request state lives on the model. Idempotent."""
    with _WATCH_LOCK:
        if lm.model in _WATCHED:
            return
        for site in lm.sites:
            lm.model.get_submodule(site.name).register_forward_pre_hook(_deadline_hook)
        _WATCHED.add(lm.model)


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
    head = None if lm is None or not hasattr(lm.model, "get_output_embeddings") else lm.model.get_output_embeddings()
    vocab = int(head.weight.shape[0]) if head is not None and hasattr(head, "weight") else 0
    n_q, n_k = len(b.tokens.ids), len(b.key_tokens.ids)
    if name == "Induction":
        n_q = n_k = _induction_tokens()
    return budget.Sizes(n_q, n_k, b.n_heads, b.n_kv_heads, b.d_head, b.d_model, b.n_layers, vocab)


@contextmanager
def admitted(name: str, ctx: Ctx) -> Iterator[budget.Sizes]:
    """Check view ``name``'s memory (MHA_VIZ_MAX_REQUEST_MB) and, where a limit is set, its time
    (MHA_VIZ_MAX_REQUEST_S) before it runs; hold its estimate in the process budget while it runs (waiting a
    moment, or refused, when the server is busy); cut it when it passes the time limit."""
    s = sizes(name, ctx)
    budget.check(name, s)
    budget.check_time(name, s)
    if not ctx.base.own:
        watch_deadline(model_of(ctx.config))
    need = budget.estimate(name, s)
    with ADMISSION.admit(need, name, poll=stop_if_gone), budget.deadline(budget.max_request_s(), name):
        yield s

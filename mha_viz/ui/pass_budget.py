"""The recorded model pass every view reads, admitted like any other work (issue 35 §4.3: six 1,156-token SmolLM2
pages recorded for minutes past the 30 s limit, none refused and none told "busy", since only a view was admitted,
after its page's pass had run).

    with admitted_pass(lm, text, target):   # refused over a limit; waits, or refused as busy, when the server is full
        pipeline.record(lm, text, target)   # cut with a MhaVizError when it runs past MHA_VIZ_MAX_REQUEST_S

Before the pass starts, its estimated memory (road.recording_bytes: the road's own rule) and time
(budget.recording_seconds) are checked against the per-request limits; its memory is held in the process budget while
it runs (mha_viz.pipeline.admission); the request's deadline cuts it before the next attention module
(watch_deadline). The time it took is told to mha_viz.pipeline.pace, which scales the times shown to people to this
server's pace now.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from mha_viz.pipeline import budget
from mha_viz.pipeline.admission import ADMISSION
from mha_viz.pipeline.pace import PACE
from mha_viz.pipeline.road import LoadedModel, encode, is_slim, recording_bytes
from mha_viz.ui.guard import stop_if_gone

_WATCHED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
_WATCH_LOCK = threading.Lock()


def _deadline_hook(_module: torch.nn.Module, _args: object) -> None:
    budget.check_deadline()


def watch_deadline(lm: LoadedModel) -> None:
    """Check the running request's deadline before each attention module of a shared model runs (once per
    layer of a pass: an Ablation or Head importance scan of many passes is cut between two layers). The hook
    reads only this thread's deadline; no request state lives on the model. Idempotent."""
    with _WATCH_LOCK:
        if lm.model in _WATCHED:
            return
        for site in lm.sites:
            lm.model.get_submodule(site.name).register_forward_pre_hook(_deadline_hook)
        _WATCHED.add(lm.model)


def vocab_of(lm: LoadedModel) -> int:
    """The LM head's rows (0: no LM head)."""
    head = lm.model.get_output_embeddings() if hasattr(lm.model, "get_output_embeddings") else None
    return int(head.weight.shape[0]) if head is not None and hasattr(head, "weight") else 0


def pass_sizes(lm: LoadedModel, text: str, target: str | None = None) -> budget.Sizes:
    """The sizes of one recorded pass over ``text`` (and ``target``): tokenising only."""
    tokens, target_tokens = encode(lm, text, target)
    n = max(len(tokens.ids), len(target_tokens.ids) if target_tokens else 0)
    d_head = max(1, lm.d_model // max(1, lm.n_heads))
    return budget.Sizes(n, n, lm.n_heads, lm.n_kv_heads, d_head, lm.d_model, len(lm.sites), vocab_of(lm))


@contextmanager
def admitted_pass(lm: LoadedModel, text: str, target: str | None = None, timed: bool = True) -> Iterator[budget.Sizes]:
    """Check the recorded pass's memory and time before it runs, hold its memory in the process budget while it
    runs (a moment's wait, then ServerBusy, when the server is full) and cut it at the request's deadline.
    ``timed`` False: the block runs part of the pass (a long text's first layer), so its time says nothing of the
    pace."""
    s = pass_sizes(lm, text, target)
    what = f"Recording {lm.name}"
    slim = is_slim(lm, text, target)  # a long text: the LM head's logits at the last position only
    need = recording_bytes(s, slim)  # the road's own rule: a long text by its tiled recording's memory
    secs = budget.recording_seconds(dataclasses.replace(s, vocab=0) if slim else s)
    budget.check_bytes(need, what, s)
    budget.check_seconds(secs, what, s)
    watch_deadline(lm)
    with ADMISSION.admit(need, what, poll=stop_if_gone), budget.deadline(budget.max_request_s(), what):
        start = time.monotonic()
        yield s
        if timed:
            PACE.observe(secs - budget.SECONDS_BASE, time.monotonic() - start)

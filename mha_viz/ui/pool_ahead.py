"""The session's maps computed ahead (issue 38 §3): once a long text's whole pass is recorded, every layer's pooled
exact maps at the Overview's and the Heads grid's tile sides are computed in a background thread
(mha_viz.pipeline.pool_ahead), so that Overview and another layer's Heads grid open from them. Local mode only
(hosted mode keeps its budgets: a view computes what it draws); one job per session, on its latest recording: a new
text cancels the job of the one before. Sessions on the same recording share its job (one pass over each layer, not
one per session)."""

from __future__ import annotations

import weakref

import streamlit as st

from mha_viz.analysis.plans.long_views import grid_side, is_long
from mha_viz.config import hosted
from mha_viz.figures.common import OVERVIEW_TILE
from mha_viz.pipeline.pool_ahead import PoolAhead
from mha_viz.pooling import pool_factor
from mha_viz.selection import Selection
from mha_viz.ui.cache_pass import get_recording, is_recorded

JOB = "mha_viz_pool_ahead"  # session_state: this session's job
_JOBS: weakref.WeakValueDictionary[int, PoolAhead] = weakref.WeakValueDictionary()  # id(recording) -> its job


def view_sides(n_q: int, n_k: int) -> tuple[int, ...]:
    """The tile sides the views at length ask for: the Overview's (OVERVIEW_TILE cells a side) and the Heads grid's."""
    return pool_factor(n_q, n_k, OVERVIEW_TILE), grid_side(n_q, n_k)


def pool_ahead(sel: Selection) -> PoolAhead | None:
    """This session's job on the selection's recording (a long text recorded whole, local mode): started once, kept
    while the page shows that recording; a job on another one (a new text, or one not recorded yet) is cancelled, so
    it never runs beside a recording. Returns the job, or None where none is wanted."""
    old = st.session_state.get(JOB)
    rec = get_recording(*sel.recorded) if not (hosted() or sel.config.own) and is_recorded(sel) else None
    if old is not None and rec is not None and old.recording() is rec and not old.cancelled:
        return old
    if old is not None:
        old.cancel()
        del st.session_state[JOB]
    calls = [] if rec is None else [c for c in rec.run.calls.values() if c.row_lse is not None]  # tiled calls
    if not calls or not is_long(int(calls[0].q.shape[-2]), int(calls[0].k.shape[-2])):
        return None
    job = _JOBS.get(id(rec))
    if job is None or job.recording() is not rec or job.cancelled:  # none, or another session cancelled it
        job = _JOBS[id(rec)] = PoolAhead(rec, view_sides, first=sel.layer).start()  # from the shown layer outwards
    st.session_state[JOB] = job
    return job

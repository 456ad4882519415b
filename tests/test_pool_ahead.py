"""Pooled maps computed ahead (issue 38 §3; mha_viz/pipeline/pool_ahead.py, ui/pool_ahead.py, tile_pool.py): after a
long recording, a background job keeps every layer's maps at the views' tile sides on its calls; they equal the maps
computed on demand (and the pooled eager weights), a view after the job computes no map, a cancelled job or one whose
recording is gone stops, a new text cancels the job of the one before, hosted mode starts none. SmolLM2 on a
200-token text recorded in tiles (a small TILE_BLOCK_CELLS), as a long text is; the long-text threshold lowered."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from texts import long_text
from tile_models import TOL

from mha_viz.analysis.plans import long_views as plan
from mha_viz.config import Config
from mha_viz.figures.common import OVERVIEW_TILE
from mha_viz.models import call as call_module
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import pool_ahead as pool_ahead_module
from mha_viz.pipeline import road, rows, zoom
from mha_viz.pipeline.pool_ahead import PoolAhead
from mha_viz.pooling import block_means
from mha_viz.tiles import allowed_of, pooled
from zoo import eager_pass


def _text(lm: LoadedModel, n: int = 200) -> str:
    return lm.tokenizer.decode(lm.tokenizer(long_text(15))["input_ids"][:n])


@pytest.fixture
def rec(smollm2: LoadedModel, monkeypatch) -> road.Recording:
    monkeypatch.setattr(road, "TILE_BLOCK_CELLS", 2**16)  # recorded in tiles, as a long text is
    monkeypatch.setattr(plan, "LONG_VIEW_FROM", 64)  # 200 tokens count as long
    out = road.record(smollm2, _text(smollm2))
    assert all(c.row_lse is not None and not c.pooled for c in out.run.calls.values())  # tiled, nothing pooled yet
    return out


def _counted(monkeypatch) -> list[int]:
    """Counts the pooled maps computed (one pass over a layer's scores: a view's Call.pooled_maps, or the job's),
    computing them as ever."""
    seen: list[int] = []
    for module in (call_module, pool_ahead_module):
        real = module.pooled_maps

        def counting(*args, _real=real, **kwargs):
            seen.append(1)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "pooled_maps", counting)
    return seen


def test_the_maps_ahead_equal_the_maps_on_demand_and_the_eager_weights(smollm2: LoadedModel, rec) -> None:
    job = PoolAhead(rec, lambda n_q, n_k: (7, 16)).start()  # partial last tiles (7) and whole ones
    job.join(60)
    assert job.done.is_set() and job.error is None and not job.running
    assert job.layers_done == len(job.keys) == smollm2.n_layers(smollm2.part(None))
    for call in rec.run.calls.values():
        assert sorted(call.pooled) == [7, 16]
        for f in (7, 16):
            want = pooled(call.q, call.k, call.row_lse, f, call.scaling, call.softcap, call.bias,
                          allowed_of(call.allowed), call.sink is not None).numpy()  # fmt: skip
            assert np.array_equal(call.pooled[f], want)  # exactly the map a view computes on demand
    eager = eager_pass(smollm2, torch.tensor([rec.tokens.ids])).attentions
    for layer in (0, 29):
        call = rec.run.calls[(smollm2.part(None), layer)]
        np.testing.assert_allclose(call.pooled[7], block_means(eager[layer][0].float().numpy(), 7), atol=TOL)


def test_views_after_the_job_compute_no_map(smollm2: LoadedModel, rec, monkeypatch) -> None:
    from mha_viz.ui.pool_ahead import view_sides

    n = len(rec.tokens.ids)
    grid_f = plan.grid_side(n, n)
    seen = _counted(monkeypatch)
    on_demand = zoom.layer_pooled(smollm2, rec, None, 3, Config(), grid_f)  # the Heads grid of layer 3, on demand
    assert len(seen) == 1
    seen.clear()
    job = PoolAhead(rec, view_sides).start()
    job.join(60)
    assert job.done.is_set() and len(seen) == len(job.keys)  # one pass a layer (layer 3: its Overview map alone)
    seen.clear()
    overview, f = rows.pooled_patterns(smollm2, rec, None, Config(), OVERVIEW_TILE)
    grids = [zoom.layer_pooled(smollm2, rec, None, i, Config(), grid_f) for i in range(len(job.keys))]
    assert seen == []  # every view read the maps kept ahead
    assert (f, grid_f) == view_sides(n, n) and overview.shape[:2] == (30, 9)
    np.testing.assert_array_equal(grids[3], on_demand)
    for i in (0, 15):
        call = rec.run.calls[(smollm2.part(None), i)]
        np.testing.assert_array_equal(overview[i], call.pooled_maps((f,))[0])  # recomputed: the same map
    assert len(seen) == 2


def test_a_cancelled_job_or_a_dropped_recording_stops_it(smollm2: LoadedModel, rec) -> None:
    job = PoolAhead(rec, lambda n_q, n_k: (16,))
    job.cancel()
    job.start().join(10)
    assert not job.running and job.layers_done == 0 and not job.done.is_set()
    assert not any(c.pooled for c in rec.run.calls.values())
    gone = PoolAhead(road.record(smollm2, "A short text, dropped before its maps."), lambda n_q, n_k: (4,))
    gc.collect()  # the job holds its recording weakly: nothing else holds this one
    assert gone.recording() is None
    gone.start().join(10)
    assert not gone.running and gone.layers_done == 0


def test_a_new_text_cancels_the_job_and_hosted_mode_starts_none(smollm2: LoadedModel, rec, monkeypatch) -> None:
    import streamlit as st

    from mha_viz.selection import Selection
    from mha_viz.ui.cache_pass import MODELS, get_recording
    from mha_viz.ui.pool_ahead import JOB, pool_ahead

    config = Config(model="smollm2")
    MODELS.get((config.model_name, config.model_device), lambda: smollm2)  # the loaded model, as the app holds it
    first, second = (Selection(config, _text(smollm2, n), None, None, 0) for n in (200, 150))
    get_recording(*first.recorded)
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    assert pool_ahead(first) is None and JOB not in st.session_state  # hosted: views compute what they draw
    monkeypatch.delenv("MHA_VIZ_HOSTED")
    job = pool_ahead(first)
    assert job is not None and pool_ahead(first) is job  # one job per recording
    assert pool_ahead(second) is None  # a new text, not recorded yet: the job before is cancelled
    job.join(60)
    assert not job.running and job.cancelled and JOB not in st.session_state
    get_recording(*second.recorded)
    again = pool_ahead(second)
    assert again is not None and again is not job and again.recording() is get_recording(*second.recorded)
    again.join(60)
    assert again.done.is_set()


def test_the_job_waits_for_a_page_run(rec) -> None:
    """The job runs at the page's priority and waits, between layers, while a page run of the process is under way
    (a job at nice 19 holding the GIL stalled the server's every thread)."""
    with pool_ahead_module.page_running():
        job = PoolAhead(rec, lambda n_q, n_k: (16,)).start()
        job.join(1.0)
        assert job.running and job.layers_done == 0  # nothing while the page runs
    job.join(60)
    assert job.done.is_set() and job.layers_done == len(job.keys)


def test_the_job_starts_at_the_shown_layer_and_goes_outwards(smollm2: LoadedModel, rec) -> None:
    from mha_viz.pipeline.pool_ahead import outwards

    job = PoolAhead(rec, lambda n_q, n_k: (16,), first=21)
    assert [layer for _, layer in job.keys[:6]] == [21, 20, 22, 19, 23, 18]  # its neighbours open next
    assert sorted(job.keys) == sorted(rec.run.calls) and len(set(job.keys)) == 30
    assert outwards([("d", 0), ("d", 1), ("d", 2)], None) == [("d", 0), ("d", 1), ("d", 2)]
    assert [la for _, la in outwards([("d", i) for i in range(4)], 0)] == [0, 1, 2, 3]


def _paused_mid_layer(monkeypatch) -> tuple[list[int], object, object]:
    """The job's pooled_maps in blocks of 16 rows, its first block's hook held until ``go`` is set (``started`` set
    there): the test enters a page run while the job is inside a layer. Returns (blocks begun, started, go)."""
    import threading

    started, go = threading.Event(), threading.Event()
    blocks: list[int] = []
    real = pool_ahead_module.pooled_maps

    def in_blocks(q, k, *args, between=None, **kwargs):
        def hook() -> None:
            blocks.append(1)
            if len(blocks) == 2:  # the first block is done: hold here until the page runs
                started.set()
                go.wait(30)
            between()

        return real(q, k, *args, between=hook, cells=int(q.shape[1]) * int(k.shape[-2]) * 16, **kwargs)

    monkeypatch.setattr(pool_ahead_module, "pooled_maps", in_blocks)
    return blocks, started, go


def test_the_job_waits_inside_a_layer_while_a_page_runs(rec, monkeypatch) -> None:
    """A page run that starts while the job is inside a layer has the cores to itself: the job waits before its next
    block of rows, not only before its next layer."""
    blocks, started, go = _paused_mid_layer(monkeypatch)
    job = PoolAhead(rec, lambda n_q, n_k: (16,)).start()
    assert started.wait(30)
    with pool_ahead_module.page_running():
        go.set()
        job.join(0.5)
        assert len(blocks) == 2 and job.layers_done == 0 and job.running  # waiting inside layer 0
    job.join(60)
    assert job.done.is_set() and job.error is None and job.layers_done == 30
    call = rec.run.calls[job.keys[0]]
    np.testing.assert_allclose(call.pooled[16], call.pooled_maps((16,))[0], atol=1e-7)  # the whole layer 0


def test_a_layer_a_page_computed_meanwhile_is_dropped_and_cancel_stops_inside_a_layer(rec, monkeypatch) -> None:
    blocks, started, go = _paused_mid_layer(monkeypatch)
    job = PoolAhead(rec, lambda n_q, n_k: (16, 40)).start()
    assert started.wait(30)
    first = rec.run.calls[job.keys[0]]
    with pool_ahead_module.page_running():
        go.set()
        job.join(0.3)
        page = first.pooled_maps((16, 40))  # the page computes the layer the job is inside: kept on the call
    job.join(60)
    per_layer = -(-len(rec.tokens.ids) // 16)  # blocks of 16 rows a layer
    assert job.done.is_set() and job.layers_done == 30
    assert len(blocks) == 2 + 29 * per_layer  # layer 0 given up after its first block: computed once, by the page
    np.testing.assert_array_equal(first.pooled[16], page[0])
    blocks.clear()
    started.clear()
    go.clear()
    for call in rec.run.calls.values():
        call.pooled.clear()
    stopped = PoolAhead(rec, lambda n_q, n_k: (16,)).start()
    assert started.wait(30)
    stopped.cancel()
    go.set()
    stopped.join(10)
    assert not stopped.running and stopped.layers_done == 0 and len(blocks) == 2  # stopped before its next block
    assert not any(c.pooled for c in rec.run.calls.values())


def test_sessions_on_one_recording_share_its_job(smollm2: LoadedModel, rec, monkeypatch) -> None:
    import streamlit as st

    from mha_viz.selection import Selection
    from mha_viz.ui.cache_pass import MODELS, get_recording
    from mha_viz.ui.pool_ahead import JOB, pool_ahead

    config = Config(model="smollm2")
    MODELS.get((config.model_name, config.model_device), lambda: smollm2)
    sel = Selection(config, _text(smollm2, 180), None, None, 12)
    get_recording(*sel.recorded)
    with pool_ahead_module.page_running():  # the job waits: both sessions see it under way
        job = pool_ahead(sel)
        assert job is not None and [la for _, la in job.keys[:3]] == [12, 11, 13]  # from the shown layer
        del st.session_state[JOB]  # another session on the same recording: the same job, not a second one
        assert pool_ahead(sel) is job
        job.cancel()  # the first session went to another text: the second one's next run starts it again
        again = pool_ahead(sel)
        assert again is not job and again.running and not again.cancelled
    again.join(60)
    assert again.done.is_set() and not job.running
    del st.session_state[JOB]

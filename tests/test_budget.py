"""Every request has a budget: estimates, refusals with what to lower, caches that hold their caps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from texts import long_text

from conftest import SENTENCE
from mha_viz.analysis.patterns import contribution_norms, head_distances, js_distance
from mha_viz.config import Config
from mha_viz.pipeline import budget
from mha_viz.pipeline.own_road import own_trace
from mha_viz.pipeline.road import record, traces
from mha_viz.trace import MhaVizError
from mha_viz.ui.memo import SizedCache, nbytes


def test_estimates_grow_with_size_and_the_worst_urls_are_refused(monkeypatch) -> None:
    monkeypatch.delenv("MHA_VIZ_MAX_REQUEST_MB", raising=False)
    small = budget.Sizes(16, 16, 8, 8, 64, 512)
    big = budget.Sizes(512, 512, 64, 64, 8, 512, n_layers=6)
    for view in ("Heads", "Overview", "Compare heads", "Head count", "W^O", "Two sentences", "Ablation"):
        assert budget.estimate(view, big) > budget.estimate(view, small) > 0
    budget.check("Heads", small)
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    assert budget.max_request_mb() == 768 and budget.max_grid_heads() == 32
    with pytest.raises(MhaVizError, match=r"limit per request is 768 MB \(MHA_VIZ_MAX_REQUEST_MB\)"):
        budget.check("Overview", budget.Sizes(512, 512, 256, 256, 8, 2048, n_layers=12))
    with pytest.raises(MhaVizError, match="MHA_VIZ_MAX_GRID_HEADS"):
        budget.check_grid(64)


def test_limit_from_the_environment_reaches_the_pipeline(minilm, monkeypatch) -> None:
    monkeypatch.setenv("MHA_VIZ_MAX_REQUEST_MB", "1")
    with pytest.raises(MhaVizError, match=r"Recording the model on this input would need about .* MB; the limit"):
        record(minilm, SENTENCE)
    with pytest.raises(MhaVizError, match=r"Shorten|shorter text"):
        own_trace(minilm, "word " * 400, Config(model="own", d_model=512, n_heads=64))
    monkeypatch.setenv("MHA_VIZ_MAX_REQUEST_MB", "oops")  # a bad value falls back to the default
    assert len(traces(Config(), SENTENCE, layers=[0], lm=minilm)[2]) == 1


def test_head_distances_chunked_float32_match_the_float64_reference() -> None:
    rng = np.random.default_rng(0)
    p = rng.random((7, 9, 11)) ** 3
    p /= p.sum(-1, keepdims=True)
    ref = js_distance(p[:, None], p[None, :]).mean(-1)
    np.fill_diagonal(ref, 0.0)
    for chunk in (1, 50, 1 << 22):  # one head at a time, small blocks, everything at once
        np.testing.assert_allclose(head_distances(p, chunk_cells=chunk), ref, atol=2e-6)


def test_contribution_norms_without_the_big_array() -> None:
    g = torch.Generator().manual_seed(0)
    z, w_o = torch.randn(5, 7, 4, generator=g), torch.randn(5, 4, 12, generator=g)
    expected = torch.linalg.norm(torch.bmm(z, w_o), dim=-1).numpy()
    np.testing.assert_allclose(contribution_norms(z.numpy(), w_o.numpy()), expected, rtol=1e-5)


def test_sized_cache_holds_its_caps() -> None:
    cache = SizedCache("t", max_entries=3, max_bytes=1000)
    calls = []

    def make(n: int):
        calls.append(n)
        return np.zeros(n, dtype=np.uint8)

    assert cache.get_or_compute("big", lambda: make(5000)).nbytes == 5000
    assert cache.total == 0 and cache.skipped == 1  # computed, returned, not kept
    for key, size in (("a", 400), ("b", 400), ("c", 400)):
        cache.get_or_compute(key, lambda size=size: make(size))
    assert cache.total <= 1000 and cache.total == 800  # "a" was evicted to make room for "c"
    cache.get_or_compute("c", lambda: make(1))
    assert calls[-1] == 400  # "c" came from the cache
    held = {"x": np.zeros(10, np.float32), "y": (torch.zeros(4),)}
    assert nbytes(held) == 40 + 16 + 2  # arrays, tensors and the key strings


def test_caches_together_hold_the_process_limit(monkeypatch) -> None:
    """Every cache under its own caps, and all of them together under MHA_VIZ_CACHE_MB: the least recently
    used entry of any cache goes first."""
    from mha_viz.ui import memo

    first, second = SizedCache("first", 10, 10_000), SizedCache("second", 10, 10_000)
    monkeypatch.setattr(memo, "CACHES", [first, second])
    monkeypatch.setenv("MHA_VIZ_CACHE_MB", str(2500 / 2**20))  # 2,500 bytes for both
    first.get_or_compute("a", lambda: np.zeros(1000, np.uint8))
    second.get_or_compute("b", lambda: np.zeros(1000, np.uint8))
    first.get_or_compute("a", lambda: np.zeros(1, np.uint8))  # "a" used again: "b" is now the oldest
    second.get_or_compute("c", lambda: np.zeros(1000, np.uint8))
    assert "a" in first and "b" not in second and "c" in second
    assert memo.total_bytes() == 2000 <= 2500
    assert second.get_or_compute("huge", lambda: np.zeros(3000, np.uint8)).nbytes == 3000  # returned, not kept
    assert "huge" not in second and second.skipped == 1 and memo.total_bytes() == 2000


def test_an_oversize_value_is_held_for_the_rest_of_its_sessions_run(monkeypatch) -> None:
    """Too large to keep: computed once per page run of a session (held until the run ends), never shared."""
    from mha_viz.ui import memo

    cache = SizedCache("held", max_entries=3, max_bytes=1000)
    calls = []

    def make(n: int):
        calls.append(n)
        return np.zeros(n, dtype=np.uint8)

    session = ["s1"]
    monkeypatch.setattr(memo, "_run_owner", lambda: session[0])
    first = cache.get_or_compute("big", lambda: make(5000))
    assert cache.get_or_compute("big", lambda: make(5000)) is first and calls == [5000]  # held in this run
    assert cache.total == 0  # not in the cache itself
    session[0] = "s2"
    assert cache.get_or_compute("big", lambda: make(5000)) is not first and len(calls) == 2  # another session
    session[0] = "s1"
    memo.drop_held()  # s1's page run ended
    cache.get_or_compute("big", lambda: make(5000))
    assert len(calls) == 3
    cache.get_or_compute("other", lambda: make(6000))  # the latest oversize value replaces the held one
    cache.get_or_compute("big", lambda: make(5000))
    assert len(calls) == 5
    session[0] = None  # outside a script run: nothing is held
    cache.get_or_compute("x", lambda: make(7000))
    cache.get_or_compute("x", lambda: make(7000))
    assert len(calls) == 7
    for owner in ("s1", "s2"):
        session[0] = owner
        memo.drop_held()
    assert not memo._HELD


def test_the_pages_pass_admits_a_long_text_by_its_tiled_cost(smollm2, monkeypatch) -> None:
    """A long text is recorded in tiles: the page's pass is admitted by the tiled recording's memory (as the road
    checks it), not by the untiled [h, n, n] estimate that refused 8,150 tokens under the local 2,048 MB default."""
    from mha_viz.pipeline.road import is_slim, tiled_bytes
    from mha_viz.ui.pass_budget import admitted_pass, pass_sizes

    monkeypatch.delenv("MHA_VIZ_MAX_REQUEST_MB", raising=False)
    monkeypatch.delenv("MHA_VIZ_HOSTED", raising=False)
    monkeypatch.delenv("MHA_VIZ_ALLOWED_MODELS", raising=False)
    ids = smollm2.tokenizer(long_text(600))["input_ids"][:8150]
    text = smollm2.tokenizer.decode(ids)
    assert is_slim(smollm2, text)
    s = pass_sizes(smollm2, text)
    assert budget.recording_estimate(s) > budget.max_request_mb() * 2**20 > tiled_bytes(s) + budget.SLACK
    with admitted_pass(smollm2, text, timed=False) as got:  # refused before the fix
        assert got.n_q == s.n_q >= 8000


def test_one_admission_rule_for_a_recording() -> None:
    """road.recording_bytes is the one rule (issue 36 §3): a slim (long) text by its tiled recording, else the untiled
    estimate with one layer's trace; the road's check refuses exactly what it counts over the limit."""
    from mha_viz.pipeline.road import _check_recording, recording_bytes, tiled_bytes

    s = budget.Sizes(8150, 8150, 9, 3, 64, 576, 30)  # SmolLM2's shape at 8,150 tokens
    tiled, untiled = recording_bytes(s, True), recording_bytes(s, False)
    assert tiled < untiled // 4  # no [h, n, n] per layer in the tiled one
    assert untiled == budget.recording_estimate(s) > s.recording_bytes()
    assert tiled > tiled_bytes(s) > s.n_layers * 4 * s.n_heads * s.n_q * s.d_head  # every layer's q at least
    for slim in (True, False):
        need = recording_bytes(s, slim)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MHA_VIZ_MAX_REQUEST_MB", str(need // 2**20))  # just under the need: refused
            with pytest.raises(MhaVizError, match=f"about {need / 2**20:,.0f} MB"):
                _check_recording(s, slim)
            mp.setenv("MHA_VIZ_MAX_REQUEST_MB", str(need // 2**20 + 1))  # just over it: admitted
            _check_recording(s, slim)


def test_the_road_and_the_page_admit_a_pass_by_the_same_rule(minilm, monkeypatch) -> None:
    """The page's pass (ui/pass_budget.admitted_pass) and the road's record() refuse and admit the same text at the
    same limit, both by road.recording_bytes."""
    from mha_viz.pipeline.road import is_slim, recording_bytes
    from mha_viz.ui.pass_budget import admitted_pass, pass_sizes

    monkeypatch.delenv("MHA_VIZ_HOSTED", raising=False)
    monkeypatch.delenv("MHA_VIZ_MAX_REQUEST_S", raising=False)
    need = recording_bytes(pass_sizes(minilm, SENTENCE), is_slim(minilm, SENTENCE))
    monkeypatch.setenv("MHA_VIZ_MAX_REQUEST_MB", str(need // 2**20))
    refused = []
    for attempt in (lambda: record(minilm, SENTENCE), lambda: admitted_pass(minilm, SENTENCE).__enter__()):
        with pytest.raises(MhaVizError, match=r"would need about [\d,]+ MB") as err:
            attempt()
        refused.append(str(err.value).split(" would need ")[1])
    assert refused[0] == refused[1]  # the same figure
    monkeypatch.setenv("MHA_VIZ_MAX_REQUEST_MB", str(need // 2**20 + 1))
    with admitted_pass(minilm, SENTENCE, timed=False) as s:
        assert len(record(minilm, SENTENCE).tokens.ids) == s.n_q


def test_the_caches_keep_a_long_recording_locally_and_stay_small_hosted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Locally the caches together hold a long text's recording (SmolLM2's 8,192 tokens, ~1 GB: at 320 MB it was
    recorded again, 10-15 minutes, on every page run); hosted mode keeps 320 MB; MHA_VIZ_CACHE_MB overrides both."""
    from mha_viz.ui.memo import cache_limit_bytes

    monkeypatch.delenv("MHA_VIZ_CACHE_MB", raising=False)
    monkeypatch.delenv("MHA_VIZ_ALLOWED_MODELS", raising=False)
    monkeypatch.delenv("MHA_VIZ_HOSTED", raising=False)
    assert cache_limit_bytes() == 2048 * 2**20 >= 2**30
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    assert cache_limit_bytes() == 320 * 2**20
    monkeypatch.setenv("MHA_VIZ_CACHE_MB", "64")
    assert cache_limit_bytes() == 64 * 2**20

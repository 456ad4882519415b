"""Slim recordings (long texts): only q, k, v, bias and mask per call, and X and the rest of one layer from a
pass run as far as that layer. Every value a view gets is the same as from a whole recording; the dashboard
draws the same X and weights from either."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

from mha_viz.config import Config
from mha_viz.models.load import LoadedModel, prepare
from mha_viz.pipeline import road as pipeline
from mha_viz.pipeline.road import layer_call, layer_trace, record
from mha_viz.studies.sweeps import all_patterns
from zoo import build

TEXT = "The slim recording keeps what the pattern needs, and the river bank was too wide to cross at night."
TRACE_FIELDS = ("x", "q", "k", "v", "scores", "pattern", "z", "concat", "output", "W_O")


@pytest.fixture
def slim(monkeypatch):
    """Every recording in this test is slim (as a long text's would be)."""
    monkeypatch.setattr(pipeline, "SLIM_BYTES", 0)


def test_slim_recording_keeps_only_the_pattern_core(minilm: LoadedModel, monkeypatch) -> None:
    whole = record(minilm, TEXT)
    monkeypatch.setattr(pipeline, "SLIM_BYTES", 0)
    thin = record(minilm, TEXT)
    assert thin.slim and not whole.slim
    for key, call in thin.run.calls.items():
        full = whole.run.calls[key]
        assert call.x is None and call.wo_in is None and call.wo_out is None
        for name in ("q", "k", "v"):
            assert torch.equal(getattr(call, name), getattr(full, name)), (key, name)
        assert call.delta == full.delta
    assert pipeline.d_model(thin) == pipeline.d_model(whole) == minilm.d_model


def test_slim_traces_equal_whole_ones(minilm: LoadedModel, monkeypatch) -> None:
    whole = record(minilm, TEXT)
    monkeypatch.setattr(pipeline, "SLIM_BYTES", 0)
    thin = record(minilm, TEXT)
    for layer in (0, 3, 5):
        want = layer_trace(minilm, whole, None, layer, Config())
        weights_only = layer_trace(minilm, thin, None, layer, Config(), x=False)
        assert weights_only.x.shape == (len(thin.tokens.ids), 0)  # no X: said by its shape, never made up
        for name in TRACE_FIELDS[1:]:
            assert torch.equal(getattr(weights_only, name), getattr(want, name)), (layer, name)
        got = layer_trace(minilm, thin, None, layer, Config())  # X wanted: the model run to this layer
        for name in TRACE_FIELDS:
            assert torch.equal(getattr(got, name), getattr(want, name)), (layer, name)
    regrouped = layer_trace(minilm, thin, None, 2, Config(heads=6), x=False)  # re-split heads need X: fetched
    assert torch.equal(regrouped.pattern, layer_trace(minilm, whole, None, 2, Config(heads=6)).pattern)
    everyone = all_patterns(minilm, whole, None, Config())  # [L, H, n, n]
    np.testing.assert_array_equal(all_patterns(minilm, thin, None, Config()), everyone)


def test_slim_rotary_decoder_layer_gets_its_pre_rotary_q_and_k(monkeypatch) -> None:
    lm = prepare(build("llama"), None, "llama")
    ids = torch.randint(3, 120, (1, 12), generator=torch.Generator().manual_seed(5))
    labels = tuple(f"t{i}" for i in range(12))
    tokens = pipeline.Tokens(tuple(ids[0].tolist()), labels, labels, (False,) * 12)
    whole = pipeline.Recording(tokens, None, pipeline.run_model(lm, ids))
    thin = pipeline.Recording(tokens, None, pipeline.run_model(lm, ids, extras=False), slim=True)
    assert thin.run.logits is None and whole.run.logits is not None  # a slim pass keeps no logits
    call, full = layer_call(lm, thin, None, 1), whole.run.calls[("decoder", 1)]
    for name in ("q", "k", "v", "x", "q_pre", "k_pre", "wo_in", "wo_out", "allowed"):
        assert torch.equal(getattr(call, name), getattr(full, name)), name


def test_dashboard_draws_the_same_from_a_slim_recording(slim, minilm: LoadedModel) -> None:
    text = TEXT + " (slim)"
    at = run_app(view="Lesson", text=text, layer="2")
    assert_clean(at)
    want = layer_trace(minilm, record(minilm, text), None, 2, Config())  # slim too: X from the pass to layer 2
    shown = [array(h["z"]) for s in specs(at) for h in heatmaps(s)]
    (x,) = [z for z in shown if z.shape == tuple(want.x.shape)]  # X [n, d_model], beside the opening pattern
    np.testing.assert_allclose(x, want.x.numpy(), rtol=1e-6, atol=1e-6)
    at = run_app(view="Heads", text=text, layer="2")
    assert_clean(at)
    grid = next(s for s in specs(at) if len(heatmaps(s)) == want.n_heads)
    for h, hm in enumerate(heatmaps(grid)):
        np.testing.assert_allclose(array(hm["z"]), want.pattern[h].numpy(), atol=1e-6)


@pytest.mark.parametrize("cells", [4, 7, 64])
def test_tiles_kept_in_the_pass_are_the_block_means_of_every_layer(
    minilm: LoadedModel, monkeypatch, cells: int
) -> None:
    from mha_viz.models import self_check
    from mha_viz.pipeline import rows
    from mha_viz.pooling import block_means, pool_factor

    whole = record(minilm, TEXT)
    everyone = all_patterns(minilm, whole, None, Config())  # [L, H, n, n]
    monkeypatch.setattr(pipeline, "SLIM_BYTES", 0)
    monkeypatch.setattr(rows, "CHUNK_CELLS", 12 * 30 * 7)  # the fallback in many row chunks too
    monkeypatch.setattr(self_check, "CHECK_BLOCK", 12 * 30 * 2)  # the pass's check (and its tiles) in f-row chunks
    thin = record(minilm, TEXT, tile_cells=cells)
    n = everyone.shape[-1]
    f = pool_factor(n, n, cells)
    kept = rows.recorded_tiles(minilm, thin, "encoder", Config(), f)
    assert kept is not None and kept.shape == (6, 12, -(-n // f), -(-n // f))
    want = block_means(everyone, f)
    np.testing.assert_allclose(kept, want, atol=1e-6)
    tiles, got_f = rows.pooled_patterns(minilm, thin, None, Config(), cells)
    assert got_f == f and np.array_equal(tiles, kept)
    assert rows.recorded_tiles(minilm, thin, "encoder", Config(causal=True), f) is None  # a what-if: recomputed
    causal, _ = rows.pooled_patterns(minilm, thin, None, Config(causal=True), cells)
    np.testing.assert_allclose(
        causal, block_means(all_patterns(minilm, whole, None, Config(causal=True)), f), atol=1e-6
    )
    assert rows.recorded_tiles(minilm, record(minilm, TEXT), "encoder", Config(), f) is None  # none asked: none kept


def test_heads_draws_a_long_texts_layer_before_the_whole_pass(slim, minilm: LoadedModel, monkeypatch) -> None:
    """Issue 22 §4: a long text on Heads is drawn from a pass run only as far as its layer; the whole recording
    comes after. With the whole pass failing, the grid is there all the same (from the first layer alone), with
    the same weights as a whole recording gives, and the failure is said once, below it."""
    calls: list[str] = []
    first, whole = pipeline.record_layer, pipeline.record

    def record_layer(*args, **kwargs):
        calls.append("layer")
        return first(*args, **kwargs)

    def record_fails(*args, **kwargs):
        calls.append("whole")
        raise pipeline.MhaVizError("the whole pass stopped here")

    monkeypatch.setattr(pipeline, "record_layer", record_layer)
    monkeypatch.setattr(pipeline, "record", record_fails)
    text = TEXT + " (first layer)"
    at = run_app(view="Heads", text=text, layer="3")
    assert not at.exception, [e.value for e in at.exception]
    assert calls == ["layer", "whole"]
    assert [e.value for e in at.error] == ["the whole pass stopped here"]
    monkeypatch.setattr(pipeline, "record", whole)
    want = layer_trace(minilm, record(minilm, text), None, 3, Config())
    grid = next(s for s in specs(at) if len(heatmaps(s)) == want.n_heads)
    for h, hm in enumerate(heatmaps(grid)):
        np.testing.assert_allclose(array(hm["z"]), want.pattern[h].numpy(), atol=1e-6)


def test_a_long_text_recorded_after_its_first_layer_opens_as_usual(slim, minilm: LoadedModel) -> None:
    """After the first layer, the page records every layer and runs again: the found head's caption is back, and
    the whole recording is cached (the next page reads it, not another first-layer pass)."""
    from mha_viz.selection import Selection
    from mha_viz.ui.cache import is_recorded

    text = TEXT + " Then it was the animal again."
    config = Config()
    assert not is_recorded(Selection(config, text))
    at = run_app(view="Heads", text=text, layer="3")
    assert_clean(at)
    assert is_recorded(Selection(config, text))
    assert any("Layer " in c.value and "head" in c.value for c in at.caption), [c.value for c in at.caption]


def test_a_recording_too_large_to_keep_is_not_run_again_and_again(slim, minilm: LoadedModel, monkeypatch) -> None:
    """A whole recording larger than its cache holds is kept for one page run only: the page must not run again to
    read it (it would record it again, forever); it says so and stays on the first layer's view."""
    from mha_viz.ui.cache import get_recording

    calls: list[str] = []
    whole = pipeline.record

    def record(*args, **kwargs):
        calls.append("whole")
        return whole(*args, **kwargs)

    monkeypatch.setattr(pipeline, "record", record)
    monkeypatch.setattr(get_recording.cache, "max_bytes", 1)
    at = run_app(view="Heads", text=TEXT + " (too large)", layer="1")
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    assert calls == ["whole"]
    assert any("larger than the server keeps" in i.value for i in at.info), [i.value for i in at.info]


def test_a_long_text_on_another_view_counts_its_layers(slim, minilm: LoadedModel, monkeypatch) -> None:
    """Off Heads, a long text not recorded yet is recorded whole at once, with its layers counted in the progress
    bar (told once per layer: MiniLM's 6), and no first-layer pass."""
    import mha_viz.ui as ui

    told: list[tuple[int, int]] = []
    counted = ui.recording_progress
    monkeypatch.setattr(ui, "recording_progress", lambda fn: counted(lambda d, t: (told.append((d, t)), fn(d, t))))
    monkeypatch.setattr(pipeline, "record_layer", lambda *a, **k: pytest.fail("a first-layer pass off Heads"))
    at = run_app(view="Lesson", text=TEXT + " (another view)", layer="2")
    assert_clean(at)
    assert told == [(k, 6) for k in range(1, 7)]

"""A long recording's key column in every layer × head from its statistics (mha_viz/pipeline/focus_column.py: the
found head's look at every layer on the page after a long recording, 8.8 s at 8,192 tokens when it computed 256 whole
rows a layer). SmolLM2 on a 200-token text recorded in tiles (a small TILE_BLOCK_CELLS), as a long text is: the
column equals the model's own eager weights (rows the causal mask hides from the key: exactly 0), no layer's whole
rows are computed, and the found head is the one the whole rows give."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from texts import long_text
from tile_models import TOL

from mha_viz.config import Config
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import focus_column, road, rows
from zoo import eager_pass


@pytest.fixture
def tiled(smollm2: LoadedModel, monkeypatch) -> tuple[str, road.Recording]:
    monkeypatch.setattr(road, "TILE_BLOCK_CELLS", 2**16)  # recorded in tiles, as a long text is
    text = smollm2.tokenizer.decode(smollm2.tokenizer(long_text(15))["input_ids"][:200])
    rec = road.record(smollm2, text)
    assert all(c.row_lse is not None for c in rec.run.calls.values())
    return text, rec


def _whole_rows_counted(monkeypatch) -> list[int]:
    """Counts the whole rows computed (pipeline.rows.layer_rows: a layer's rows × every key), computing them."""
    seen: list[int] = []
    real = rows.layer_rows

    def counting(*args, **kwargs):
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(rows, "layer_rows", counting)
    return seen


def test_the_column_equals_the_eager_weights_without_whole_rows(smollm2: LoadedModel, tiled, monkeypatch) -> None:
    _, rec = tiled
    eager = np.stack([a[0].float().numpy() for a in eager_pass(smollm2, torch.tensor([rec.tokens.ids])).attentions])
    n, k = len(rec.tokens.ids), 60
    queries = (70, 0, 5, 59, 60, 61, 120, n - 1)  # rows 0–59 may not see key 60 (causal): their weight is 0
    old = rows.focus_column(smollm2, rec, None, Config(), k, queries)
    seen = _whole_rows_counted(monkeypatch)
    got = focus_column.focus_column(smollm2, rec, None, Config(), k, queries)
    every = focus_column.focus_column(smollm2, rec, None, Config(), k)
    assert seen == []  # one column a layer, never a layer's whole rows
    assert got.shape == (30, 9, len(queries)) and got.dtype == np.float32 and every.shape == (30, 9, n)
    np.testing.assert_allclose(got, eager[:, :, list(queries), k], atol=TOL, rtol=1e-4)
    np.testing.assert_allclose(every, eager[:, :, :, k], atol=TOL, rtol=1e-4)
    np.testing.assert_allclose(got, old, atol=TOL, rtol=1e-4)  # the whole rows' column
    assert not got[:, :, 1:4].any() and got[:, :, 4].min() > 0  # hidden rows exactly 0; the key's own row sees it
    what_if = focus_column.focus_column(smollm2, rec, None, Config(scaled=False), k, queries)
    assert len(seen) == 30  # a what-if on the weights: the whole rows, as before
    np.testing.assert_array_equal(what_if, rows.focus_column(smollm2, rec, None, Config(scaled=False), k, queries))


def test_the_found_head_reads_the_column_from_the_statistics(smollm2: LoadedModel, tiled, monkeypatch) -> None:
    from mha_viz.analysis.opening import opening_choice, opening_pair
    from mha_viz.selection import Selection
    from mha_viz.ui import found
    from mha_viz.ui.cache_pass import MODELS, get_recording

    text, _ = tiled
    config = Config(model="smollm2")
    MODELS.get((config.model_name, config.model_device), lambda: smollm2)  # the loaded model, as the app holds it
    sel = Selection(config, text, None, None, 0)
    rec = get_recording(*sel.recorded)  # recorded in tiles (the fixture's TILE_BLOCK_CELLS)
    monkeypatch.setattr(found, "SAMPLE_ROWS", 64)  # a long text's sample of rows (256 at 8,192 tokens)
    seen = _whole_rows_counted(monkeypatch)
    encoded: list[str] = []
    real_encode = found.encode
    monkeypatch.setattr(found, "encode", lambda lm, text, target: encoded.append(text) or real_encode(lm, text, target))
    got = found.found_head(sel)
    assert seen == []  # the page after a long recording computes no layer's whole rows
    assert encoded == []  # nor tokenizes the recorded text again: the recording's tokens
    labels = rec.tokens.labels
    q, k = opening_pair(labels)
    sample = np.linspace(0, len(labels) - 1, 63).round().astype(int)
    queries = (q, *sorted(set(sample.tolist()) - {q}))
    whole = rows.focus_column(smollm2, rec, None, Config(), k, queries)  # the old way: whole rows
    want = opening_choice(whole[:, :, :, None], 0, 0)
    assert got is not None and (got.layer, got.head) == (want.layer, want.head)
    assert got.weight == pytest.approx(want.weight, abs=TOL)

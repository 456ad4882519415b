"""Long texts without [L, H, n, n]: rows, (query, key) maps and pooled tiles equal the full computation on a
shorter text (mha_viz.rows against pipeline.layer_trace / studies.all_patterns and the figures' pooling)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mha_viz import rows
from mha_viz.analysis import drop_special
from mha_viz.config import Config
from mha_viz.figures.common import pool_blocks
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import layer_trace, record
from mha_viz.referents import default_pair, focus_head
from mha_viz.studies import all_patterns
from tests.test_long_text import long_text

TEXT = long_text(4)  # about 70 MiniLM tokens


@pytest.fixture(scope="module")
def rec(minilm: LoadedModel):
    return record(minilm, TEXT)


@pytest.mark.parametrize("measure", ["weight", "contribution"])
def test_rows_are_the_layers_rows(minilm: LoadedModel, rec, measure: str) -> None:
    config = Config(wo="random") if measure == "contribution" else Config()  # W^O edits change contributions
    full = all_patterns(minilm, rec, None, config, measure)  # [L, H, n, n]
    n = full.shape[-1]
    chosen = [0, 3, n // 2, n - 1]
    for layer in (0, 3, full.shape[0] - 1):
        got = rows.layer_rows(minilm, rec, None, layer, config, chosen, measure)
        np.testing.assert_allclose(got, full[layer][:, chosen], atol=1e-6)
        np.testing.assert_allclose(rows.layer_rows(minilm, rec, None, layer, config, slice(5, 9), measure),
                                   full[layer][:, 5:9], atol=1e-6)  # fmt: skip


def test_rows_follow_the_causal_what_if(minilm: LoadedModel, rec) -> None:
    config = Config(causal=True)
    full = layer_trace(minilm, rec, None, 2, config).pattern.numpy()
    got = rows.layer_rows(minilm, rec, None, 2, config, [1, 7, 20])
    np.testing.assert_allclose(got, full[:, [1, 7, 20]], atol=1e-6)
    assert got[:, 0, 2:].max() == 0.0  # row 1 sees keys 0 and 1 only


def test_focus_weights_and_found_head(minilm: LoadedModel, rec) -> None:
    full = all_patterns(minilm, rec, None, Config())
    q, k = default_pair(rec.query_tokens("encoder").labels)
    w = rows.focus_weights(minilm, rec, None, Config(), q, k)
    np.testing.assert_allclose(w, full[:, :, q, k], atol=1e-6)
    assert w.shape == full.shape[:2] and w.max() > 0
    layer, head = np.unravel_index(int(np.argmax(w)), w.shape)
    assert (int(layer), int(head)) == focus_head(full, q, k)[:2]


@pytest.mark.parametrize("hide", [False, True])
def test_pooled_tiles_are_the_pool_of_the_full_patterns(minilm: LoadedModel, rec, hide: bool) -> None:
    full = all_patterns(minilm, rec, None, Config())  # [L, H, n, n]
    L, H, n, _ = full.shape
    special = np.asarray(rec.query_tokens("encoder").special)
    keep = np.flatnonzero(~special) if hide else None
    if hide:
        sub, kept, _ = drop_special(full.reshape(L * H, n, n), special)
        assert kept.size == n - 2
        whole = sub.reshape(L, H, kept.size, kept.size)
    else:
        whole = full
    for cells in (16, 10, 7):  # f = 5, 7, 10: partial last blocks
        want, f = pool_blocks(whole, cells)
        assert f > 1
        old = rows.CHUNK_CELLS
        try:
            rows.CHUNK_CELLS = H * n * f * 2  # two blocks of rows a chunk: several chunks per layer
            got, g = rows.pooled_patterns(minilm, rec, None, Config(), cells, keep=keep, keep_k=keep)
        finally:
            rows.CHUNK_CELLS = old
        assert g == f and got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_pooled_contributions(minilm: LoadedModel, rec) -> None:
    full = all_patterns(minilm, rec, None, Config(), "contribution")
    want, f = pool_blocks(full, 12)
    got, g = rows.pooled_patterns(minilm, rec, None, Config(), 12, "contribution")
    assert g == f
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_regrouped_heads_fall_back_to_the_trace(minilm: LoadedModel, rec) -> None:
    config = dataclasses.replace(Config(), heads=4)
    full = layer_trace(minilm, rec, None, 1, config).pattern.numpy()
    np.testing.assert_allclose(rows.layer_rows(minilm, rec, None, 1, config, [2, 4]), full[:, [2, 4]], atol=1e-6)

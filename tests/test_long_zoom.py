"""Views at length (issue 38 §3): the plan's choices, a zoom's exact weights and the pooled maps against the model's
own eager weights on a shorter text recorded in tiles (a small TILE_BLOCK_CELLS), the Heads and Overview views drawn
as pooled maps with a zoom (real AppTest, the threshold lowered), and Cancel of a long recording."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import array, assert_clean, heatmaps, run_app, specs
from texts import long_text

from mha_viz.analysis.plans import long_views as plan
from mha_viz.config import LONG_VIEW_FROM, MAX_ZOOM_SIDE, ZOOM_SIDE, Config
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline import road, rows, zoom
from mha_viz.pooling import block_means
from zoo import eager_pass

# --- the plan ------------------------------------------------------------------------------------------------


def test_long_means_beyond_the_threshold() -> None:
    assert not plan.is_long(LONG_VIEW_FROM) and plan.is_long(LONG_VIEW_FROM + 1)
    assert plan.is_long(10, LONG_VIEW_FROM + 1)  # cross-attention: the longer side counts
    assert plan.tile_side(8192, 8192, 256) == 32 and plan.tile_side(600, 600, 256) == 3
    assert plan.map_side(8192, 8192) == 32 and plan.grid_side(8192, 8192) == 128
    assert plan.tile_caption(32) == "each cell: the mean weight of a 32×32 block of queries × keys"


def test_default_zoom_sits_around_the_focus_token() -> None:
    z = plan.default_zoom(8192, 8192, 4000)
    assert (z.q0, z.q1, z.k0, z.k1) == (4000 - ZOOM_SIDE // 2, 4000 + ZOOM_SIDE // 2) * 2
    assert z.q0 <= 4000 < z.q1
    first, last = plan.default_zoom(8192, 8192, 3), plan.default_zoom(8192, 8192, 8191)
    assert (first.q0, first.q1) == (0, ZOOM_SIDE) and (last.q0, last.q1) == (8192 - ZOOM_SIDE, 8192)
    causal = plan.default_zoom(8192, 8192, 4000, causal=True)  # keys end at the window's last row
    assert causal.k1 == causal.q1 and causal.k1 - causal.k0 == ZOOM_SIDE
    short = plan.default_zoom(20, 30, 5)
    assert (short.q0, short.q1, short.k0, short.k1) == (0, 20, 0, 30)


def test_zoom_from_ranges_and_box_are_inside_and_cut() -> None:
    z = plan.zoom_from_ranges(8192, 8192, (100, 163), (40, 10))  # inclusive, either order
    assert (z.q0, z.q1, z.k0, z.k1) == (100, 164, 10, 41)
    big = plan.zoom_from_ranges(8192, 8192, (0, 5000), (7000, 9000))
    assert big.q1 - big.q0 == MAX_ZOOM_SIDE and big.q0 == 0 and (big.k0, big.k1) == (7000, 7000 + MAX_ZOOM_SIDE)
    box = plan.zoom_from_box(8192, 8192, [130.4, 99.6], [4000.2, 4063.7])  # x keys, y queries
    assert (box.q0, box.q1, box.k0, box.k1) == (4000, 4065, 99, 132)
    assert not plan.was_cut([130.4, 99.6], [4000.2, 4063.7], box)
    wide = plan.zoom_from_box(8192, 8192, [-50, 9000], [10, 20])
    assert (wide.k0, wide.k1) == (0, MAX_ZOOM_SIDE) and plan.was_cut([-50, 9000], [10, 20], wide)


def test_where_words_and_excerpt() -> None:
    z = plan.Zoom(4000, 4128, 3990, 4128, 8192, 8192)
    assert plan.span_words(4000, 4128, 8192) == "tokens 4,000–4,127 of 8,192"
    assert plan.where_words(z) == "queries: tokens 4,000–4,127 of 8,192; keys: tokens 3,990–4,127 of 8,192"
    assert "[128 × 138 of 8,192 × 8,192]" in plan.zoom_title("Layer 3", 2, z)
    pieces = [f" w{i}" for i in range(40)]
    before, inside, after = plan.excerpt(pieces, 20, 23, context=3)
    assert (before, inside, after) == ("… w17 w18 w19", "w20 w21 w22", "w23 w24 w25 …")
    assert plan.excerpt(pieces, 0, 2, context=3)[0] == "" and plan.excerpt(pieces, 38, 40, context=3)[2] == ""


# --- exact against the model's own eager weights -------------------------------------------------------------
# The eager weights are float32; ours are rebuilt in float64 from the same float32 q, k: a weight near 1 differs by
# the eager score's own float32 rounding (seen: 1.25e-5 at 5 of 262,144 MiniLM weights), hence a relative part.
TOL = {"atol": 1e-5, "rtol": 1e-4}


def _tiled_recording(lm: LoadedModel, text: str, monkeypatch) -> road.Recording:
    monkeypatch.setattr(road, "TILE_BLOCK_CELLS", 2**16)  # blocks of a few rows: tiling engages on a short text
    rec = road.record(lm, text)
    part = lm.part(None)
    assert all(rec.run.calls[(part, i)].row_lse is not None for i in range(lm.n_layers(part)))  # recorded in tiles
    return rec


def _exact_windows(lm: LoadedModel, rec: road.Recording, eager: tuple[torch.Tensor, ...]) -> None:
    n = len(rec.tokens.ids)
    L = lm.n_layers(lm.part(None))
    for layer in (0, L // 2, L - 1):
        want = eager[layer][0].float().numpy()  # [h, n, n]
        for r, k in (
            (slice(0, 40), slice(0, 40)),
            (slice(n - 70, n - 6), slice(n // 3, n - 1)),
            (slice(5, 6), slice(0, n)),
            (slice(0, 20), slice(n // 2, n // 2 + 20)),  # causal: rows that see none of its keys (0, not 1/n)
        ):
            got = zoom.window(lm, rec, None, layer, Config(), r, k)
            assert got.shape == want[:, r, k].shape
            np.testing.assert_allclose(got, want[:, r, k], **TOL)
        for f in (32, 7):  # whole tiles and a partial last one
            np.testing.assert_allclose(zoom.layer_pooled(lm, rec, None, layer, Config(), f), block_means(want, f),
                                       **TOL)  # fmt: skip
        np.testing.assert_allclose(zoom.layer_pooled(lm, rec, None, layer, Config(), 16, slice(2, 3)),
                                   block_means(want[2:3], 16), **TOL)  # fmt: skip
    full = np.stack([e[0].float().numpy() for e in eager])  # [L, H, n, n]: the pooled Overview
    told: list[tuple[int, int]] = []  # the Overview's progress bar: told after each layer
    got, f = rows.pooled_patterns(lm, rec, None, Config(), 48, told=lambda done, total: told.append((done, total)))
    np.testing.assert_allclose(got, block_means(full, f), **TOL)
    assert told == [(i + 1, L) for i in range(L)]


def test_zoom_and_pooled_maps_equal_minilms_eager_weights(minilm: LoadedModel, monkeypatch) -> None:
    rec = _tiled_recording(minilm, long_text(40), monkeypatch)
    assert len(rec.tokens.ids) == 512
    _exact_windows(minilm, rec, eager_pass(minilm, torch.tensor([rec.tokens.ids])).attentions)


def test_zoom_and_pooled_maps_equal_smollm2s_eager_weights(smollm2: LoadedModel, monkeypatch) -> None:
    # 200 tokens: 9 heads × 200² scores go in blocks of ~36 query rows (the lowered TILE_BLOCK_CELLS), tiles of 32 and
    # 7 end partial, as at 600 tokens (length is not what is checked here; test_tiles.py checks 1,024 tokens)
    text = smollm2.tokenizer.decode(smollm2.tokenizer(long_text(15))["input_ids"][:200])
    rec = _tiled_recording(smollm2, text, monkeypatch)
    n = len(rec.tokens.ids)
    assert 190 <= n <= 210 and smollm2.n_heads * n * n > 4 * 2**16  # several blocks a layer
    eager = eager_pass(smollm2, torch.tensor([rec.tokens.ids])).attentions
    assert float(eager[0][0, 0, 3, 10]) == 0.0  # causal: the zoom's upper triangle is exactly 0 too
    _exact_windows(smollm2, rec, eager)


def test_what_ifs_take_the_rows_of_the_trace(minilm: LoadedModel) -> None:
    rec = road.record(minilm, long_text(30))
    config = Config(causal=True)
    want = road.layer_trace(minilm, rec, None, 1, config).pattern.numpy()
    np.testing.assert_allclose(zoom.window(minilm, rec, None, 1, config, slice(50, 90), slice(10, 80)),
                               want[:, 50:90, 10:80], atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(zoom.layer_pooled(minilm, rec, None, 1, config, 20), block_means(want, 20), atol=1e-6)
    assert float(np.abs(want[:, 50:90, 10:80]).max()) > 0


# --- the views (real app, MiniLM, the threshold lowered so that 482 tokens count as long) -----------------------
TEXT = long_text(30)  # 482 MiniLM tokens


def _zoom_of(at) -> tuple[str, dict]:
    titled = [(str(s["layout"].get("title", {}).get("text", "")), s) for s in specs(at)]
    found = [(t, hm) for t, s in titled for hm in heatmaps(s) if "exact weights of queries" in t]
    assert len(found) == 1, [t for t, _ in found]
    return found[0]


def test_heads_at_length_draw_pooled_maps_and_an_exact_zoom(minilm: LoadedModel, monkeypatch) -> None:
    import html

    monkeypatch.setattr(plan, "LONG_VIEW_FROM", 256)
    rec = road.record(minilm, TEXT)
    labels, n = rec.tokens.labels, len(rec.tokens.ids)
    want = road.layer_trace(minilm, rec, None, 2, Config()).pattern.numpy()  # [12, n, n]
    at = run_app(view="Heads", text=TEXT, layer="2", head="head 4")
    assert_clean(at)
    f = plan.grid_side(n, n)
    assert any("pooled exact map" in c.value and plan.tile_caption(f) in c.value for c in at.caption)
    grids = [array(hm["z"]) for s in specs(at) for hm in heatmaps(s) if array(hm["z"]).shape == (-(-n // f),) * 2]
    assert len(grids) == 12
    np.testing.assert_allclose(np.stack(grids), block_means(want, f), atol=1e-6)
    q = labels.index(at.selectbox(key="focus").value)
    title, hm = _zoom_of(at)  # around the focus token
    z = plan.default_zoom(n, n, q)
    assert title.startswith("Layer 2, head 4") and z.q0 <= q < z.q1
    assert [html.unescape(str(v)) for v in hm["y"]] == list(labels[z.rows])
    assert [html.unescape(str(v)) for v in hm["x"]] == list(labels[z.keys])
    np.testing.assert_allclose(array(hm["z"]), want[4, z.rows, z.keys], atol=1e-6)
    at.slider(key="zoom_rows").set_value((100, 163))
    at.slider(key="zoom_keys").set_value((80, 200)).run()  # the ranges move it
    assert_clean(at)
    title, hm = _zoom_of(at)
    assert "queries 100–163 × keys 80–200" in title
    np.testing.assert_allclose(array(hm["z"]), want[4, 100:164, 80:201], atol=1e-6)
    assert [html.unescape(str(v)) for v in hm["y"]] == list(labels[100:164])
    assert any("queries: tokens 100–163 of 482; keys: tokens 80–200 of 482" in c.value for c in at.caption)
    at.selectbox(key="focus").set_value(labels[300]).run()  # a new focus token: the window follows it
    title, hm = _zoom_of(at)
    z = plan.default_zoom(n, n, 300)
    assert f"queries {z.q0}–{z.q1 - 1} × keys {z.k0}–{z.k1 - 1}" in title and z.q0 <= 300 < z.q1
    np.testing.assert_allclose(array(hm["z"]), want[4, z.rows, z.keys], atol=1e-6)
    assert any(f"queries: tokens {z.q0}–{z.q1 - 1} of 482" in c.value for c in at.caption)


def test_overview_at_length_says_its_tile_size(minilm: LoadedModel, monkeypatch) -> None:
    monkeypatch.setattr(plan, "LONG_VIEW_FROM", 256)
    at = run_app(view="Overview", text=TEXT)
    assert_clean(at)
    f = -(-482 // 48)  # figures.common.OVERVIEW_TILE cells a side
    said = [c.value for c in at.caption if plan.tile_caption(f) in c.value]
    assert len(said) == 1 and "zoom" in said[0]
    monkeypatch.setattr(plan, "LONG_VIEW_FROM", 1024)  # not long: no zoom promised
    at = run_app(view="Overview", text=TEXT)
    assert not any("zoom" in c.value for c in at.caption if plan.tile_caption(f) in c.value)


# --- Cancel ---------------------------------------------------------------------------------------------------


def test_a_cancelled_recording_says_so_and_records_on_request(minilm: LoadedModel, monkeypatch) -> None:
    from apptest_helpers import new_app

    from mha_viz.selection import Selection
    from mha_viz.ui import long_cancel
    from mha_viz.ui.cache import is_recorded

    monkeypatch.setattr(road, "SLIM_BYTES", 2**20)  # 482 MiniLM tokens count as a long (slim) recording
    monkeypatch.setattr(plan, "LONG_VIEW_FROM", 256)
    text = long_text(32)
    at = new_app(view="Heads", text=text, layer="2")  # a layer named: the found head is not looked for first
    at.session_state[long_cancel.KEY] = long_cancel.cancel_key(Config(), text, None)  # what the Cancel click set
    at.run()
    assert_clean(at)
    assert any("was cancelled" in i.value for i in at.info)
    assert not specs(at) and not is_recorded(Selection(Config(), text))  # nothing drawn, nothing recorded
    at.button(key="long_resume").click().run()  # record it after all
    assert_clean(at)
    assert not any("was cancelled" in i.value for i in at.info) and _zoom_of(at)
    assert is_recorded(Selection(Config(), text))


def test_a_pass_stopped_in_its_progress_call_leaves_the_model_whole(minilm: LoadedModel) -> None:
    """What Cancel does to the pass: Streamlit raises inside the progress callback (the next layer's)."""

    class Stop(Exception):
        pass

    def told(done: int, total: int) -> None:
        if done == 3:
            raise Stop

    text = long_text(5)
    before = road.record(minilm, text)
    with pytest.raises(Stop):
        road.record(minilm, long_text(30), progress=told)
    after = road.record(minilm, text)
    for key, call in before.run.calls.items():
        torch.testing.assert_close(after.run.calls[key].q, call.q, rtol=0, atol=0)
    ids = torch.tensor([before.tokens.ids])
    eager = eager_pass(minilm, ids).attentions  # the model's own attention is back and agrees
    np.testing.assert_allclose(road.layer_trace(minilm, after, None, 5, Config()).pattern.numpy(),
                               eager[5][0].numpy(), atol=1e-5)  # fmt: skip


def test_the_pooled_map_caps_its_colours_and_outlines_the_zoom() -> None:
    from mha_viz.figures.zoom import pooled_map

    tiles = np.random.default_rng(0).random((256, 256)) * 0.01
    tiles[:, 0] = 0.9  # a sink column: 1 cell in 256
    fig = pooled_map(tiles, 4, 1024, 1024, "t", (100, 164, 90, 160))
    assert fig.data[0].zmax < 0.011 and "percentile" in fig.data[0].colorbar.title.text
    rect = fig.layout.shapes[0]
    assert (rect.x0, rect.x1, rect.y0, rect.y1) == (89.5, 159.5, 99.5, 163.5)
    even = pooled_map(np.full((8, 8), 0.125), 1, 8, 8, "t")
    assert even.data[0].zmax is None and "percentile" not in even.data[0].colorbar.title.text
    assert fig.layout.dragmode == "select" and len(fig.data[1].x) == 48 * 48  # the markers a box selects


@pytest.mark.parametrize("hosted", [False, True])
def test_the_text_box_takes_an_8192_token_text_locally_only(minilm: LoadedModel, monkeypatch, hosted: bool) -> None:
    from mha_viz.config import MAX_LONG_TEXT_CHARS, MAX_TEXT_CHARS

    monkeypatch.setenv("MHA_VIZ_HOSTED", "1" if hosted else "0")
    text = long_text(520)  # about 40,000 characters: over 8,192 SmolLM2 tokens of English
    assert MAX_TEXT_CHARS < len(text) <= MAX_LONG_TEXT_CHARS
    at = run_app(view="Overview", text=text)
    assert not at.exception
    box = at.text_area(key="text")
    assert box.proto.max_chars == (MAX_TEXT_CHARS if hosted else MAX_LONG_TEXT_CHARS)
    ignored = [w.value for w in at.warning if "Ignored from the link" in w.value]
    assert bool(ignored) == hosted  # hosted: the link's text is cut to its limit, and the page says so

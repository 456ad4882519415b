"""Views at length made readable (issue 38 §3): room for the grid's vertical labels, whitespace tokens labelled short,
a zoom box that is always seen, the focus row by blocks of keys, colours capped at the 99th percentile in the grid and
the Overview (the hover keeps the real value), and the text panel joining word pieces as the tokenizer's offsets say.
Figures from hand-made maps; one real AppTest of SmolLM2 over the start of the GPL-3 (the threshold lowered)."""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

from mha_viz.analysis.plans import long_views as plan
from mha_viz.figures import zoom as zoom_fig
from mha_viz.figures.finish import finish
from mha_viz.figures.grids import heads_grid, overview

GPL = Path("/usr/share/common-licenses/GPL-3")
N = 8150  # the 8k screenshots' SmolLM2 tokens of the GPL-3
# the labels the GPL-3's first SmolLM2 tokens get (models/tokens.readable, distinct_labels)
FIRST = ["␣" * 19, "GNU (1)", "GEN (2)", "ERAL (3)", "PU (4)", "BLIC (5)", "LICENSE (6)", "↵" + "␣" * 22 + " (7)"]


def _labels(n: int = N) -> list[str]:
    return FIRST + [f"w{i} ({i})" for i in range(len(FIRST), n)]


def _sinky(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Block means as a long text's: small everywhere, a bright sink column and a brighter diagonal."""
    z = np.random.default_rng(seed).random(shape).astype(np.float32) * 1e-3
    z[..., 0] = 0.6
    idx = np.arange(min(shape[-2:]))
    z[..., idx, idx] = 0.01
    return z


def _strict_px(label: str, size: float) -> float:
    """A label's drawn length at its widest: any non-ASCII mark 1 em, other characters 0.62 em."""
    return size * sum(1.0 if not c.isascii() else 0.62 for c in label)


# --- 1 and 2: the grid's vertical labels have room below; a whitespace run is labelled short ----------------------
def test_whitespace_labels_are_short_and_stay_distinct() -> None:
    assert plan.short_label("␣" * 19) == "␣×19"
    assert plan.short_label("↵" + "␣" * 22 + " (7)") == "↵␣×22 (7)"
    assert plan.short_label("↵↵ (21)") == "↵↵ (21)" and plan.short_label("␣ (9)") == "␣ (9)"  # short runs stay
    assert plan.short_label("GNU (1)") == "GNU (1)" and plan.short_label("a␣␣␣") == "a␣␣␣"
    assert plan.short_labels(["␣␣␣", "␣×3"]) == ["␣␣␣", "␣×3"]  # would collide: left as they are


def test_grid_labels_are_short_and_have_room_below() -> None:
    labels = _labels()
    f = plan.grid_side(N, N)
    grid = _sinky((9, math.ceil(N / f), math.ceil(N / f)))  # [9, 64, 64]
    spec = finish(heads_grid(grid, labels, [f"head {i} · K/V {i // 3}" for i in range(9)], 3, False, labels,
                             "weight", f))  # fmt: skip
    x = spec["layout"]["xaxis7"]  # the bottom row's first panel shows the key labels
    shown = [html.unescape(t) for t in x["ticktext"]]
    assert shown[0] == f"0–{f - 1}: ␣×19" and not any("␣␣" in t for t in shown)
    assert x["tickangle"] == -90
    size = x["tickfont"]["size"]
    need = max(_strict_px(t, size) for t in shown)
    assert spec["layout"]["margin"]["b"] >= need + 8  # every vertical label whole, with a few pixels to spare


# --- 3: the zoom's box is drawn at least MIN_BOX of the map, outlined, and labelled when enlarged ---------------
def test_a_small_zoom_box_is_drawn_large_enough_to_see() -> None:
    tiles = _sinky((255, 255))
    fig = zoom_fig.pooled_map(tiles, 32, N, N, "t", (0, 64, 0, 64))
    red, edge = fig.layout.shapes[0], fig.layout.shapes[1]
    assert red.x1 - red.x0 >= 0.02 * N and red.y1 - red.y0 >= 0.02 * N  # ≥ 163 positions (about 11 px), not 64
    assert red.x0 >= -0.5 and red.y0 >= -0.5  # kept inside the map, still over keys 0–63
    assert red.x0 <= 0 and red.x1 >= 63
    assert edge.line.color.lower() == "#ffffff" and edge.x0 < red.x0 and edge.x1 > red.x1  # an outline around it
    assert [a.text for a in fig.layout.annotations] == ["zoom"] and fig.layout.annotations[0].xanchor == "left"
    end = zoom_fig.pooled_map(tiles, 32, N, N, "t", (N - 64, N, N - 64, N))  # at the far corner: labelled on its left
    assert end.layout.annotations[0].xanchor == "right" and end.layout.annotations[0].x < end.layout.shapes[0].x0
    big = zoom_fig.pooled_map(tiles, 32, N, N, "t", (4000, 4256, 3900, 4156))  # large enough: drawn as it is
    rect = big.layout.shapes[0]
    assert (rect.x0, rect.x1, rect.y0, rect.y1) == (3899.5, 4155.5, 3999.5, 4255.5) and not big.layout.annotations


# --- 4: the focus row by blocks of keys --------------------------------------------------------------------
def test_row_blocks_are_each_blocks_largest_weight_and_sum() -> None:
    row = np.random.default_rng(1).random((3, 100)).astype(np.float32)
    top, key, sums = plan.row_blocks(row, 32)  # 4 blocks, the last of 4 keys
    assert top.shape == key.shape == sums.shape == (3, 4)
    for b in range(4):
        part = row[:, 32 * b : 32 * b + 32]
        np.testing.assert_array_equal(top[:, b], part.max(1))
        np.testing.assert_array_equal(key[:, b], 32 * b + part.argmax(1))
        np.testing.assert_allclose(sums[:, b], part.sum(1), rtol=1e-6)


def test_the_focus_row_map_caps_its_colours_and_names_each_blocks_top_key() -> None:
    row = np.random.default_rng(2).random((9, N)).astype(np.float32) * 1e-3  # [h, n_k]
    row[:, 0], row[4, 5000] = 0.6, 0.3
    top, key, sums = plan.row_blocks(row, 32)
    names = plan.short_labels(_labels())
    fig = zoom_fig.focus_row_map(top, key, sums, 32, names, [f"head {i}" for i in range(9)], "t")
    hm = fig.data[0]
    assert np.asarray(hm.z).shape == (9, math.ceil(N / 32))
    assert hm.zmax == pytest.approx(np.percentile(top, 99), rel=1e-5) and np.asarray(hm.z).max() == pytest.approx(0.6)
    assert "percentile" in hm.colorbar.title.text and "%{z" in hm.hovertemplate and "%{text}" in hm.hovertemplate
    assert hm.text[4][5000 // 32] == "w5000 (5000)" and hm.text[0][0] == "␣×19"


# --- 5: the Heads grid and the Overview cap their colours (the opened head's map's rule); the hover keeps the value
def test_the_pooled_grid_caps_its_colours_and_keeps_the_real_values() -> None:
    labels = _labels(64 * 32)
    grid = _sinky((9, 64, 64))
    spec = heads_grid(grid, labels, None, 3, False, labels, "weight", 32, cap=True).to_plotly_json()
    axis = spec["layout"]["coloraxis"]
    # the 96th percentile: the sink column and the diagonal (2 of each row's 64 cells) lie above it
    assert axis["cmax"] == pytest.approx(float(np.percentile(grid, 96)))
    assert "96th" in axis["colorbar"]["title"]["text"]
    z = np.stack([array(t["z"]) for t in spec["data"] if t["type"] == "heatmap"])
    np.testing.assert_array_equal(z, grid)  # the real means, hovered as "mean %{z}"
    assert float(z.max()) > axis["cmax"] and all("%{z" in t["hovertemplate"] for t in spec["data"])
    assert zoom_fig.cap_for(64) == 96 and zoom_fig.cap_for(255) == 99  # the opened head's map (255 a side): the 99th


def test_the_overview_at_length_caps_its_colours_and_hovers_the_real_value() -> None:
    tiles = _sinky((30, 9, 48, 48))
    fig = overview(tiles, group=3, pooled=170, cap=99)
    hm = fig.data[0]
    canvas = np.asarray(hm.z, dtype=float)
    cap = 94  # 48 cells a side: the sink column and the diagonal lie above it (zoom.cap_for)
    assert hm.zmax == pytest.approx(np.nanpercentile(canvas, cap)) and np.nanmax(canvas) == pytest.approx(0.6)
    assert f"{cap:g}th" in hm.colorbar.title.text and "%{z" in hm.hovertemplate
    assert "170×170" in fig.layout.title.text
    short = overview(tiles, group=3, pooled=4)  # not at length (no cap): to the largest weight
    assert short.data[0].zmax == pytest.approx(0.6) and "percentile" not in short.data[0].colorbar.title.text
    grid = heads_grid(tiles[0], _labels(48 * 4), None, 3, False, None, "weight", 4)  # nor the grid of a short text
    assert grid.layout.coloraxis.cmax == pytest.approx(0.6)


# --- 6: the text panel shows the text as typed between the tokens' offsets ------------------------------------
def test_the_excerpt_joins_word_pieces_by_their_offsets() -> None:
    pieces = ["No", " Sur", "render", " of", " Others", "'", " Freedom", ".", "\n\n  ", "If", " conditions"]
    text, offsets = "".join(pieces), [(0, 0)]  # a BOS has no characters
    for p in pieces:
        offsets.append((offsets[-1][1], offsets[-1][1] + len(p)))
    offsets[1] = (0, 2)
    before, inside, after = plan.text_excerpt(text, offsets, 2, 4, context=2)
    assert (before, inside, after) == ("No", "Surrender", "of Others …")  # not "Sur render"
    assert plan.text_excerpt(text, offsets, 7, 11, context=5) == (
        "… Surrender of Others'",
        "Freedom. ↵ If",
        "conditions",
    )


# --- the page (real AppTest, SmolLM2, the start of the GPL-3 counted as long) --------------------------------
SMOL = "SmolLM2-135M (bundled)"


def test_heads_at_length_on_the_gpl_is_readable(monkeypatch) -> None:
    import torch

    from mha_viz.models.load import load_model
    from mha_viz.models.tokens import tokenize
    from mha_viz.pipeline import road
    from zoo import eager_pass

    monkeypatch.setattr(plan, "LONG_VIEW_FROM", 256)
    monkeypatch.setattr(road, "SLIM_BYTES", 2**20)  # recorded as a long text is: slim, in tiles (as at 8,192)
    monkeypatch.setattr(road, "TILE_BLOCK_CELLS", 2**16)
    lm = load_model("smollm2", "cpu")
    text = lm.tokenizer.decode(lm.tokenizer(GPL.read_text())["input_ids"][:300])
    tokens = tokenize(lm.tokenizer, text, lm.max_tokens, lm.name)
    n, labels = len(tokens.ids), tokens.labels
    at = run_app(src=SMOL, view="Heads", text=text, layer="3", head="head 2")
    assert_clean(at)
    want = eager_pass(lm, torch.tensor([tokens.ids])).attentions[3][0].float().numpy()  # [9, n, n]: the model's own
    charts = {(s["layout"].get("title") or {}).get("text", ""): s for s in specs(at)}
    zoom = next(s for t, s in charts.items() if "exact weights of queries" in t)
    ys = [html.unescape(str(v)) for v in heatmaps(zoom)[0]["y"]]
    assert "␣×19" in ys and not any("␣␣␣" in y for y in ys)  # the GPL's indentation, labelled short
    panel = " ".join(m.value for m in at.markdown if m.value.startswith(("Queries:", "Keys:")))
    assert "GENERAL PUBLIC LICENSE" in panel.replace("\\", "") and "GEN ERAL" not in panel  # joined by offsets
    at.selectbox(key="focus").set_value(labels[250]).run()  # a focus that sees 250 keys
    assert_clean(at)
    strip = next(s for s in specs(at) if "as the query" in (s["layout"].get("title") or {}).get("text", ""))
    hm = heatmaps(strip)[0]
    top = array(hm["z"]).reshape(9, -1)
    f = plan.map_side(n, n)
    assert top.shape == (9, -(-n // f))  # blocks of keys, not n columns
    np.testing.assert_allclose(top, plan.row_blocks(want[:, 250], f)[0], atol=1e-5, rtol=1e-4)  # the model's own
    assert hm["zmax"] < top.max() and "percentile" in hm["colorbar"]["title"]["text"]
    said = [c.value for c in at.caption if "gives the most weight to" in c.value]
    best = int(np.argmax(want[2, 250]))  # the opened head's top key, named first
    assert len(said) == 1 and f"“{plan.short_label(labels[best])}”" in said[0].replace("\\", "")

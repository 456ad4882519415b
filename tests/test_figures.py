"""Figures carry the real numbers: shapes, labels, pooling, and typed arrays."""

from __future__ import annotations

import math

import numpy as np
import plotly.io as pio
import pytest

from mha_viz.figures import (
    ROLE_COLOURS,
    block_labels,
    heads_grid,
    matrix_heatmap,
    overview,
    pool_blocks,
    roles_map,
)


def test_pool_blocks_exact_means_with_partial_block() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((2, 7, 7)).astype(np.float32)
    pooled, f = pool_blocks(x, 3)
    assert f == 3 and pooled.shape == (2, 3, 3)
    np.testing.assert_allclose(pooled[1, 0, 1], x[1, 0:3, 3:6].mean(), rtol=1e-6)
    np.testing.assert_allclose(pooled[0, 2, 2], x[0, 6, 6], rtol=1e-6)  # the 1×1 partial corner
    same, one = pool_blocks(x, 7)
    assert one == 1 and np.array_equal(same, x)
    assert block_labels(["a", "b", "c", "d", "e"], 2) == ["0–1: a", "2–3: c", "4–4: e"]


def test_heads_grid_small_text_is_exact_and_clickable() -> None:
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(5), size=(3, 5)).astype(np.float32)  # [3 heads, 5, 5]
    tokens = ["[CLS]", "the (1)", "cat", "the (3)", "[SEP]"]
    fig = heads_grid(p, tokens)
    maps = [t for t in fig.data if t.type == "heatmap"]
    overlays = [t for t in fig.data if t.type == "scatter"]
    assert len(maps) == 3 and len(overlays) == 3
    np.testing.assert_array_equal(maps[2].z, p[2])
    assert list(maps[0].x) == tokens and maps[0].z.dtype == np.float32
    assert (overlays[1].y[7], overlays[1].x[7]) == ("the (1)", "cat")  # cell (1, 2): query → key
    np.testing.assert_allclose(overlays[1].customdata[7], [p[1, 1, 2], 1.0])  # (weight, head)
    assert fig.layout.hovermode == "closest"  # the hover names the cell under the pointer
    assert fig.layout.coloraxis.cmin == 0.0


def test_heads_grid_long_text_is_block_averaged() -> None:
    n = 300
    p = np.full((2, n, n), 1.0 / n, dtype=np.float32)
    p[0, :, 0] += 0.5
    tokens = [f"t{i}" for i in range(n)]
    fig = heads_grid(p, tokens)
    maps = [t for t in fig.data if t.type == "heatmap"]
    assert len(maps) == 2 and maps[0].z.shape == (100, 100)  # 3×3 blocks
    assert "mean" in maps[0].hovertemplate and not [t for t in fig.data if t.type == "scatter"]
    np.testing.assert_allclose(maps[0].z[0, 0], (3 * (1 / n) * 3 + 3 * 0.5) / 9, rtol=1e-5)
    assert len(pio.to_json(fig, validate=False)) < 3_000_000


def test_matrix_heatmap_masks_and_scales() -> None:
    z = np.array([[0.5, -np.inf], [1.0, -2.0]])
    fig = matrix_heatmap(z, ["a", "b"], ["a", "b"], "scores", diverging=True)
    data = fig.data[0]
    assert np.isnan(data.z[0, 1]) and data.zmid == 0.0 and data.zmax == 2.0 and data.zmin == -2.0


def test_overview_tiles_and_click_targets() -> None:
    p = np.random.default_rng(2).random((2, 3, 100, 100)).astype(np.float32)
    fig = overview(p, tile=48)
    z = fig.data[0].z
    assert z.shape == (2 * 34 + 2, 3 * 34 + 4)  # 100 tokens -> 3×3 blocks -> 34 cells, gap 2
    assert fig.data[1].customdata.tolist()[-1] == [1, 2]
    np.testing.assert_allclose(z[0, 0], p[0, 0, :3, :3].mean(), rtol=1e-5)


def test_roles_map_colours_by_label_and_escapes_token_names() -> None:
    labels = np.array(
        [["induction", "mixed", "<|endoftext|> sink"], ["induction", "previous token", "mixed"]], dtype=object
    )
    scores = {"prev": np.array([[0.0, 0.1, 0.2], [0.3, 0.9, 0.5]]), "induction": np.array([[0.9, 0, 0], [0.8, 0, 0]])}
    fig = roles_map(labels, scores)
    (cells,) = [t for t in fig.data if t.type == "heatmap"]
    order = list(cells.colorbar.ticktext)  # "label (count)", known labels first, "mixed" last
    assert order == ["induction (2)", "previous token (1)", "&lt;|endoftext|&gt; sink (1)", "mixed (2)"]
    z = np.asarray(cells.z)
    assert z.shape == (2, 3) and z[0, 0] == z[1, 0] == 0 and z[0, 1] == z[1, 2] == 3
    scale = [c for _, c in cells.colorscale]
    assert scale[0] == ROLE_COLOURS["induction"] and scale[-1] == ROLE_COLOURS["mixed"]
    marks = {t.meta: t for t in fig.data if t.type == "scatter"}
    assert set(marks) == {"induction", "previous token", "&lt;|endoftext|&gt; sink", "mixed"}
    custom = np.asarray(marks["previous token"].customdata)
    np.testing.assert_allclose(custom, [[1, 1, 0.9, 0.0]], rtol=1e-6)  # layer, head, prev, induction
    assert "induction %{customdata[3]:.3f}" in marks["induction"].hovertemplate
    assert "<|endoftext|>" not in pio.to_json(fig)


def test_logit_lens_escapes_token_text() -> None:
    import numpy as np

    from mha_viz.figures import logit_lens

    fig = logit_lens(np.full((2, 2), 0.5), ["<b>x</b>", "y"], [["<i>a</i>", "b"], ["c", "&"]])
    trace = fig.data[0]
    assert list(trace.x) == ["&lt;b&gt;x&lt;/b&gt;", "y"]
    assert trace.text[0][0] == "&lt;i&gt;a&lt;/i&gt;" and trace.text[1][1] == "&amp;"


def test_focus_bars_colour_each_bar_by_its_weight_as_a_colour_string() -> None:
    """Plotly warned once per bar (console.trace) for numeric bar colours; each bar now carries its colour."""
    from plotly.colors import sample_colorscale

    from mha_viz.figures import focus_bars
    from mha_viz.figures.common import SEQUENTIAL

    p = np.random.default_rng(3).dirichlet(np.ones(6), size=(2, 6)).astype(np.float32)  # [h, q, k]
    fig = focus_bars(p, list("abcdef"), 2)
    for h, bar in enumerate(fig.data):
        assert list(bar.marker.color) == sample_colorscale(SEQUENTIAL, [float(v) for v in p[h, 2]])
        assert all(str(c).startswith("rgb(") for c in bar.marker.color)


def test_long_step_titles_break_at_spaces_and_keep_their_shape_whole() -> None:
    from mha_viz.figures.heatmap import matrix_heatmap, wrap_title

    title = "2a. c_KV = norm(X · W_DKV): the latent every head's K and V come from (cached)   [22 × 16]"
    lines = wrap_title(title, 40)
    assert len(lines) > 1 and all(len(line) <= 40 for line in lines)
    assert " ".join(lines) == title and lines[-1].endswith("[22 × 16]")  # nothing lost, the shape in one piece
    assert wrap_title("Q_5 K_5ᵀ   [15 × 15]", 40) == ["Q_5 K_5ᵀ   [15 × 15]"]
    fig = matrix_heatmap(np.zeros((3, 3)), title=title, title_chars=40)
    assert fig.layout.title.text == "<br>".join(lines) and fig.layout.margin.t > 50  # room for every line
    assert matrix_heatmap(np.zeros((3, 3)), title=title).layout.title.text == title  # not asked: one line


def test_a_pair_is_two_matrices_in_one_chart_each_with_its_title_scale_and_values() -> None:
    """figures.matrix_pair (Step by step draws its matrices two to a chart): nothing of either figure is lost."""
    from apptest_helpers import array

    from mha_viz.figures.finish import finish
    from mha_viz.figures.heatmap import matrix_heatmap, matrix_pair

    rng = np.random.default_rng(0)
    rows = ["a", "b", "c"]
    q = rng.normal(size=(3, 4))
    w = rng.random((3, 3))
    left = matrix_heatmap(q, None, rows, "2a. Q", diverging=True, value_name="Q")
    right = matrix_heatmap(w, rows, rows, "6. softmax", value_name="weight", attention=True)
    spec = finish(matrix_pair(left, right))
    layout = spec["layout"]
    assert [a["text"] for a in layout["annotations"]] == ["2a. Q", "6. softmax"]  # each title over its panel
    (a,), (b,) = ([t for t in spec["data"] if t["xaxis"] == ax] for ax in ("x", "x2"))
    np.testing.assert_array_equal(array(a["z"]).reshape(3, 4), q.astype(np.float32))  # the values as given
    np.testing.assert_array_equal(array(b["z"]).reshape(3, 3), w.astype(np.float32))
    assert a["zmid"] == 0.0 and [tuple(c) for c in a["colorscale"]] == list(left.data[0].colorscale)  # its own scale
    assert b["hovertemplate"] == right.data[0].hovertemplate  # and its hover ("query → key")
    assert layout["yaxis2"]["showticklabels"] is False  # one set of row labels: the left panel's
    assert layout["yaxis2"]["tickvals"] == layout["yaxis"]["tickvals"]  # for the same rows
    x0, x1 = layout["xaxis"]["domain"]
    y0, y1 = layout["xaxis2"]["domain"]
    assert x1 < y0  # side by side, not overlapping
    for t, (lo, hi) in ((a, (x0, x1)), (b, (y0, y1))):  # each colour bar lies over its own panel, above the plot
        bar = t["colorbar"]
        assert bar["orientation"] == "h" and lo <= bar["x"] - bar["len"] / 2 and bar["x"] + bar["len"] / 2 <= hi
        assert bar["y"] > 1


def test_a_pair_built_unchecked_is_what_plotlys_checks_accept_unchanged() -> None:
    """matrix_pair builds its figure without plotly's checks (issue 36 §6: about a fifth of Step by step's page run);
    plotly's checks accept the same figure (an invalid property raises) and change nothing in it."""
    import json

    import plotly.graph_objects as go

    from mha_viz.figures.heatmap import matrix_heatmap, matrix_pair

    rng = np.random.default_rng(1)
    rows = ["The", "animal", "didn't", "<b>x</b>"]
    left = matrix_heatmap(rng.normal(size=(4, 6)), None, rows, "2a. Q_3 = X · W_Q   [4 × 6]", diverging=True)
    right = matrix_heatmap(rng.random((4, 4)), rows, rows, "6. softmax   [4 × 4]", value_name="weight", attention=True)
    pair = matrix_pair(left, right)
    checked = go.Figure(pair.to_plotly_json())  # validated
    assert json.loads(pio.to_json(checked, validate=False)) == json.loads(pio.to_json(pair, validate=False))


def test_overview_of_a_grouped_query_model_has_two_line_ticks_and_readable_tiles() -> None:
    """Issue 35 §2.8: SmolLM2's Overview (30 layers × 9 query heads, 3 per K/V head) showed the literal text
    "H0<br>kv0" under each column (the tick text was escaped) and drew its 30 × 9 tiles in 900 px at most."""
    from mha_viz.figures.common import OVERVIEW_TILE_PX
    from mha_viz.figures.finish import finish

    p = np.random.default_rng(3).random((30, 9, 12, 12)).astype(np.float32)
    spec = finish(overview(p, tile=48, group=3))
    ticks = spec["layout"]["xaxis"]["ticktext"]
    assert ticks[:4] == ["H0<br>kv0", "H1<br>kv0", "H2<br>kv0", "H3<br>kv1"]  # a line break, not its text
    assert not any("&lt;" in t or "&gt;" in t for t in ticks)
    margin = spec["layout"]["margin"]
    plot_h = spec["layout"]["height"] - margin["t"] - margin["b"]
    assert plot_h / 30 >= 0.9 * OVERVIEW_TILE_PX >= 36  # each layer's row of square tiles at least ~36 px tall
    small = finish(overview(p[:6, :9], tile=48))  # a short model keeps a compact grid
    assert small["layout"]["height"] <= 900 and small["layout"]["xaxis"]["ticktext"][0] == "H0"


HALF_ROW_PLOT_PX = 210  # a half-row heatmap's plot area at 1280 × 800, measured in Chromium (Masks, Compare heads)


@pytest.mark.parametrize("n", [6, 12, 15, 20, 25, 40, 90])
def test_rotated_token_labels_of_a_half_row_heatmap_never_overlap(n: int) -> None:
    """Issue 35 §2.8: on the small heatmaps (Lesson, Masks) the labels turned by −60° overlapped: 20 labels at
    11 px stood 9 px apart side by side in a 210 px plot. Each shown label needs a line (1.2 × its font size)."""
    labels = [f"tok{i}" for i in range(n)]
    fig = matrix_heatmap(np.zeros((n, n)), labels, labels, "t")
    x = fig.layout.xaxis
    step = labels.index(list(x.ticktext)[1]) if len(x.ticktext) > 1 else n
    apart = step * HALF_ROW_PLOT_PX / n * abs(math.sin(math.radians(x.tickangle)))  # side by side, in px
    assert apart >= 1.2 * x.tickfont.size >= 1.2 * 8, (n, step, x.tickfont.size, apart)


def test_whitespace_runs_are_named_short_on_every_token_axis() -> None:
    """A token of 19 spaces is ticked "␣×19" at any length (the long views did; the short ones drew 19 marks, seen
    in a screenshot of the GPL's header); the categories, the hover and a click still carry the whole label."""
    from mha_viz.figures.common import category_ticks

    labels = ["GNU", "␣" * 19, "↵" + "␣" * 4 + " (7)", "it"]
    ticks, _ = category_ticks(labels, 400)
    assert ticks["tickvals"] == labels
    assert ticks["ticktext"] == ["GNU", "␣×19", "↵␣×4 (7)", "it"]

"""Issue 36 §6, the server's cost per figure: finish() reads a figure's own dicts (no deep copy) and sends what
to_plotly_json() would; matrix_spec's plain dict (no plotly checks) is the very chart matrix_heatmap checks; the
matrices drawn two to a row (Step by step) are built once per set of values (ui.figure_cache)."""

from __future__ import annotations

import json

import numpy as np
import plotly.io as pio
from apptest_helpers import array

from mha_viz.figures import heads_grid, matrix_heatmap, roles_map, scores_heatmap
from mha_viz.figures.finish import finish
from mha_viz.figures.heatmap import matrix_pair, matrix_spec
from mha_viz.ui.figure_cache import finished_pairs, finished_stack, panel

RNG = np.random.default_rng(7)
TOKENS = ["[CLS]", "the", "<b>animal</b>", "it", "&", "[SEP]"]
LONG = [f"tok{i}" for i in range(90)]


def _json(fig: object) -> dict:
    return json.loads(pio.to_json(fig, validate=False))


def _figures() -> list:
    n = len(TOKENS)
    masked = RNG.normal(size=(n, n)).astype(np.float32)
    masked[np.triu_indices(n, 1)] = -np.inf
    wide = RNG.normal(size=(n, 384)).astype(np.float32)
    return [
        matrix_heatmap(
            wide,
            None,
            TOKENS,
            "1. X (one row per token)   [6 × 384]",
            diverging=True,
            value_name="X",
            height=380,
            title_chars=54,
        ),
        matrix_heatmap(masked, TOKENS, TOKENS, "5. mask <i>", diverging=True, value_name="scores"),
        scores_heatmap(masked, TOKENS, TOKENS, "scores"),
        matrix_pair(matrix_heatmap(wide, None, TOKENS, "Q"), matrix_heatmap(masked, TOKENS, TOKENS, "s")),
        heads_grid(RNG.random((4, n, n)).astype(np.float32), tuple(TOKENS), tuple(f"head {i}" for i in range(4)), 2),
        matrix_heatmap(RNG.random((90, 90)), LONG, LONG, "thinned labels: axis titles say so", attention=True),
        roles_map(np.array([["self", "[SEP] sink"], ["broad", "self"]], dtype=object), {"prev": RNG.random((2, 2))}),
    ]


def test_finish_sends_what_to_plotly_json_gives_and_leaves_the_figure_as_it_was() -> None:
    for fig in _figures():
        before = _json(fig)
        fast = finish(fig)  # the figure's own dicts, converted copy on write
        assert _json(fast) == _json(finish(fig.to_plotly_json()))  # the deep-copied route: the same chart
        assert _json(fig) == before  # nothing of the figure changed (finish copies what it sets)
        assert any(isinstance(t.get("z"), dict) and "bdata" in t["z"] for t in fast["data"] if "z" in t) or not any(
            "z" in t for t in fast["data"]
        )  # 2-D values go as typed arrays, as to_plotly_json makes them


def test_matrix_spec_is_the_chart_matrix_heatmap_checks() -> None:
    n = len(TOKENS)
    masked = RNG.normal(size=(n, n)).astype(np.float32)
    masked[0, 3], masked[1, 2] = -np.inf, np.nan
    cases = [
        ((RNG.normal(size=(n, 32)), None, TOKENS, "2a. Q_3 = X · W_Q[3]   [6 × 32]"), {"diverging": True}),
        ((masked, TOKENS, TOKENS, "5. mask"), {"diverging": True, "value_name": "scores", "height": 380}),
        ((RNG.random((n, n)), TOKENS, TOKENS, "6. softmax <b>"), {"attention": True, "value_name": "weight"}),
    ]
    for args, kwargs in cases:
        checked = matrix_heatmap(*args, **kwargs)  # built through plotly's checks
        assert _json(finish(matrix_spec(*args, **kwargs))) == _json(finish(checked))
    (a, ka), (b, kb) = cases[0], cases[2]
    plain = matrix_pair(matrix_spec(*a, **ka), matrix_spec(*b, **kb))
    assert isinstance(plain, dict)  # two dicts in: one dict out, never a plotly object
    assert _json(finish(plain)) == _json(finish(matrix_pair(matrix_heatmap(*a, **ka), matrix_heatmap(*b, **kb))))


def test_matrices_in_pairs_are_built_once_per_values_and_any_change_builds_anew() -> None:
    n = len(TOKENS)
    x, w = RNG.normal(size=(n, 384)).astype(np.float32), RNG.random((n, n)).astype(np.float32)
    panels = (
        panel(x, None, TOKENS, "1. X", diverging=True, value_name="X"),
        panel(w, TOKENS, TOKENS, "6. softmax", value_name="weight", attention=True),
        panel(x[:, :4], None, [*TOKENS[:3], "a", "b", "c"], "alone"),  # other rows: a chart of its own
    )
    first = finished_pairs(panels)
    assert [(j, pair) for j, _, pair in first] == [(0, True), (2, False)]
    again = tuple((args[:1] and (args[0].copy(), *args[1:]), dict(kw)) for args, kw in panels)  # equal, not same
    assert finished_pairs(again) is first  # a hit: the figures are not built again
    chart = finished_stack(panels)  # Step by step's one chart: the same rule
    assert finished_stack(again) is chart and finished_stack(panels[:2]) is not chart
    fresh = finished_pairs.__wrapped__(panels)  # built anew: the same charts
    assert [_json(f) for _, f, _ in fresh] == [_json(f) for _, f, _ in first]
    left, right = (t for t in _json(first[0][1])["data"] if "z" in t)
    np.testing.assert_array_equal(array(left["z"]).reshape(n, 384), x)  # every value drawn is the one given
    np.testing.assert_array_equal(array(right["z"]).reshape(n, n), w)
    w2 = w.copy()
    w2[2, 3] += 1e-6  # one weight changed: other figures
    changed = (panels[0], panel(w2, TOKENS, TOKENS, "6. softmax", value_name="weight", attention=True), panels[2])
    assert finished_pairs(changed) is not first
    retitled = (panels[0], panel(w, TOKENS, TOKENS, "6. softmax!", value_name="weight", attention=True), panels[2])
    assert finished_pairs(retitled) is not first


def test_roles_map_built_unchecked_is_what_plotlys_checks_accept_unchanged() -> None:
    """figures.roles_map builds its dict with every user text escaped and no plotly checks (issue 36 §6: most of
    the Head roles run); plotly's checks take the same figure and change nothing in it."""
    import plotly.graph_objects as go

    labels = np.array([["self", "<|im_start|> sink", "a & b"], ["broad", "self", "previous token"]], dtype=object)
    scores = {"prev": RNG.random((2, 3)), "first": RNG.random((2, 3))}
    fig = roles_map(labels, scores, "Roles <b>of</b> SmolLM2")
    checked = go.Figure(fig.to_plotly_json())  # validated: an invalid property or value raises
    assert _json(finish(checked)) == _json(finish(fig))
    spec = _json(finish(fig))
    assert spec["layout"]["title"]["text"] == "Roles &lt;b&gt;of&lt;/b&gt; SmolLM2"  # user text escaped, as safe()
    assert {t["name"] for t in spec["data"] if t.get("showlegend")} >= {"&lt;|im_start|&gt; sink (1)", "a &amp; b (1)"}


def test_stacked_rows_keep_every_panel_its_values_axes_and_place() -> None:
    """figures.stack: Step by step's rows of matrices as one chart (the browser draws one chart, not six): every
    panel keeps its title, values, hover and colour bar, on axes of its own, the rows top to bottom, not overlapping."""
    from mha_viz.figures.stack import PANELS, stacked

    n = len(TOKENS)
    x, w, out = (RNG.normal(size=(n, 384)), RNG.random((n, n)), RNG.normal(size=(n, 384)))
    specs = [
        matrix_spec(x, None, TOKENS, "1. X", diverging=True, value_name="X"),
        matrix_spec(w, TOKENS, TOKENS, "6. softmax", value_name="weight", attention=True),
        matrix_spec(out, None, TOKENS, "7. output", diverging=True, value_name="output"),
    ]
    rows = [finish(matrix_pair(specs[0], specs[1])), finish(matrix_pair(specs[2], None))]
    chart = _json(stacked(rows))
    layout = chart["layout"]
    assert layout["meta"] == PANELS and layout["height"] == sum(r["layout"]["height"] for r in rows)
    assert [a["text"] for a in layout["annotations"]] == ["1. X", "6. softmax", "7. output"]
    maps = [t for t in chart["data"] if t["type"] == "heatmap"]
    assert [(t["xaxis"], t["yaxis"]) for t in maps] == [("x", "y"), ("x2", "y2"), ("x3", "y3")]
    for t, values in zip(maps, (x, w, out), strict=True):  # each panel's values exactly, with its own hover
        np.testing.assert_array_equal(array(t["z"]).reshape(values.shape), values.astype(np.float32))
    assert (
        maps[1]["hovertemplate"]
        == _json(finish(matrix_heatmap(w, TOKENS, TOKENS, attention=True)))["data"][0]["hovertemplate"]
    )
    (a0, a1), (b0, b1), (c0, c1) = (layout[f"yaxis{s}"]["domain"] for s in ("", "2", "3"))
    assert a0 == b0 and a1 == b1 and 0 <= c0 < c1 < a0  # the pair side by side, the row alone below it
    for t, note in zip(maps, layout["annotations"], strict=True):  # the bar and the title above the panel
        top = layout[f"yaxis{t['yaxis'][1:]}"]["domain"][1]
        assert t["colorbar"]["y"] > top and note["y"] == top
    assert layout[f"xaxis{maps[2]['xaxis'][1:]}"]["anchor"] == maps[2]["yaxis"]
    import plotly.graph_objects as go

    assert len(go.Figure(chart).data) == len(chart["data"])  # plotly's checks accept the chart (an error raises)


def test_heads_grid_drawn_from_a_plain_dict_that_is_the_checked_figure() -> None:
    """The dashboard's Heads grid is heads_grid_spec's plain dict (issue 36 §6: building it as plotly objects, even
    unchecked, was about a tenth of the server's time over bench_sessions' actions); finished, it is the JSON that
    heads_grid's figure and plotly's checked figure give, every weight exactly the one given."""
    import plotly.graph_objects as go

    from mha_viz.figures.grids import heads_grid_spec
    from mha_viz.ui.common import FIGURE_BUILDERS

    n = len(TOKENS)
    short = RNG.random((12, n, n)).astype(np.float32)
    cases = [
        ((short, tuple(TOKENS), tuple(f"head {i} <b>" for i in range(12)), 4, True), {}),  # clickable overlay
        ((RNG.random((6, 90, 90)).astype(np.float32), tuple(LONG)), {"cols": 3, "value_name": "norm"}),  # pooled
        ((RNG.random((4, 8, 8)).astype(np.float32), tuple(LONG[:32])), {"pooled": 4, "cap": True, "clickable": False}),
    ]
    for args, kwargs in cases:
        spec = FIGURE_BUILDERS["heads_grid"](*args, **kwargs)  # what cached_figure("heads_grid", ...) builds
        assert type(spec) is dict  # no plotly object on the page's path
        sent = _json(finish(spec))
        assert sent == _json(finish(heads_grid(*args, **kwargs)))  # the notebook's figure: the same chart
        assert sent == _json(finish(go.Figure(heads_grid_spec(*args, **kwargs))))  # checked: accepted unchanged
    grid = _json(finish(FIGURE_BUILDERS["heads_grid"](*cases[0][0])))
    maps = [t for t in grid["data"] if t["type"] == "heatmap"]
    assert len(maps) == 12
    for i, t in enumerate(maps):
        np.testing.assert_array_equal(array(t["z"]).reshape(n, n), short[i])


def test_typed_arrays_are_the_ones_plotly_makes_for_every_kind_of_array() -> None:
    """finish() turns numeric arrays into typed arrays itself (plotly's to_typed_array_spec passes every array
    through narwhals first: 0.7 ms each, most of a Heads grid's finish): for every kind of array, the same value as
    plotly's own function gives."""
    from _plotly_utils.utils import to_typed_array_spec

    from mha_viz.figures.finish import _typed

    grid = RNG.random((6, 8)).astype(np.float32)
    arrays = {
        "f4": grid, "f8": grid.astype(np.float64), "f2": grid.astype(np.float16), "i4": np.arange(5, dtype=np.int32),
        "i8 small": np.arange(5), "i8 large": np.arange(5) * 2**40, "u8": np.arange(5, dtype=np.uint64),
        "u1": np.arange(5, dtype=np.uint8), "bool": grid > 0.5, "empty": np.zeros((0,), np.float32),
        "strided": grid[:, ::2], "transposed": grid.T, "big-endian": grid.astype(">f4"), "3-D": RNG.random((2, 3, 4)),
        "objects": np.array(["a", 1], dtype=object),
    }  # fmt: skip
    spec = {"data": [{"z": v, "name": k} for k, v in arrays.items()], "layout": {"title": {"text": "t"}}}
    out = _typed(spec)
    for trace, (name, v) in zip(out["data"], arrays.items(), strict=True):
        want, got = to_typed_array_spec(v), trace["z"]
        if isinstance(want, dict):
            assert got == want, name
        else:  # left as an array by plotly too
            assert isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want), name
    assert out["layout"] is spec["layout"]  # nothing to convert: the same dict (copy on write)

"""figures.finish: every figure leaves with fixed margins that hold its labels, no template, no automargin, and the
dict sent to Streamlit unchecked is exactly the one Plotly's checks would send; the look is written in the figure."""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import plotly.tools
import pytest
from apptest_helpers import array, panels, run_app, specs

from mha_viz.figures import comparison, heads_grid, look, matrix_heatmap, paired_bars, token_bars
from mha_viz.figures.finish import DATA_REVISION, AsBuilt, finish

LONG = ["[CLS]", "internationalisation", "of", "the", "Wörterbuch", "漢字漢字", "[SEP]"]


def _figures() -> dict[str, go.Figure]:
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(7), size=(4, 7)).astype(np.float32)  # [4 heads, 7, 7]
    scores = rng.normal(size=(7, 7)).astype(np.float32)
    scores[np.triu_indices(7, 1)] = -np.inf
    return {
        "grid": heads_grid(p, LONG),
        "heatmap": matrix_heatmap(scores, LONG, LONG, "scores", diverging=True, value_name="score"),
        "bars": token_bars(LONG, {"a": p[0, 0], "b": p[1, 0]}, "bars"),
        "paired": paired_bars(LONG, p[0, 1], p[1, 1], ("weight α", "contribution"), "paired"),
        "comparison": comparison(p[0].astype(np.float64), p[0].astype(np.float64), ("loop", "batched"), LONG, "c"),
    }


@pytest.mark.parametrize("name", list(_figures()))
def test_sent_as_checked_by_plotly(name: str) -> None:
    fig = _figures()[name]
    spec = finish(fig)
    sent = plotly.tools.return_figure_from_figure_or_data(AsBuilt(spec), validate_figure=True)
    checked = go.Figure(**spec).to_dict()  # what Streamlit would send after its own checks of the dict
    del checked["layout"]["template"]  # (the checks add the default template; ours is sent without one)
    assert json.loads(pio.to_json(sent, validate=False)) == json.loads(pio.to_json(checked, validate=False))
    assert sent is spec  # taken as it is, not rebuilt


@pytest.mark.parametrize("name", list(_figures()))
def test_no_template_no_automargin(name: str) -> None:
    fig = _figures()[name]
    spec = finish(fig)
    layout = spec["layout"]
    assert "template" not in layout  # the look is the figure's own (figures.look): drawn once, see there
    assert layout["datarevision"] == DATA_REVISION and layout["font"]["family"] == look.FONT
    axes = [k for k in layout if k.startswith(("xaxis", "yaxis"))]
    assert axes and all(layout[k]["automargin"] is False for k in axes)
    assert layout["margin"]["autoexpand"] is (name == "paired")  # only a legend may still grow the margins
    assert finish(spec) is spec  # idempotent
    for own, sent in zip(fig.to_plotly_json()["data"], spec["data"], strict=True):  # the numbers are untouched
        for k, v in own.items():
            if isinstance(v, dict) and "bdata" in v and "," not in str(v.get("shape", "")):  # 1-D: sent as a list
                assert isinstance(sent[k], list) and np.array_equal(array(v), np.asarray(sent[k]))
            elif isinstance(v, dict):  # the figure's own settings are kept; the look may add its defaults
                assert {kk: sent[k][kk] for kk in v} == v  # (a colour bar's tick format: figures/look.py)
            else:
                assert sent[k] == v


def test_margins_hold_the_longest_labels() -> None:
    """Lower bounds any font draws at least: half an em per Latin letter, a full em per CJK character."""
    figs = _figures()
    heat = finish(figs["heatmap"])["layout"]
    longest = 0.5 * len("internationalisation") * 11  # px at the tick font size (11: seven labels)
    assert heat["margin"]["l"] >= longest + 4
    rotated = abs(heat["xaxis"]["tickangle"])
    assert rotated >= 60 and heat["margin"]["b"] >= longest * np.sin(np.radians(rotated))
    assert heat["margin"]["r"] >= 30 + 4 * 7  # the colour bar and its numbers
    grid = finish(figs["grid"])["layout"]
    assert grid["margin"]["l"] >= 0.5 * len("internationalisation") * 10 and grid["margin"]["r"] >= 16 + 32
    short = finish(matrix_heatmap(np.eye(2, dtype=np.float32), ["a", "b"], ["a", "b"], "t"))["layout"]
    assert short["margin"]["l"] < heat["margin"]["l"] / 2  # fitted, not one big margin for every figure


def test_axis_titles_get_their_own_room() -> None:
    n = 300
    fig = matrix_heatmap(np.zeros((n, n), dtype=np.float32), [f"t{i}" for i in range(n)], [f"t{i}" for i in range(n)])
    plain = matrix_heatmap(np.zeros((3, 3), dtype=np.float32), ["t1", "t2", "t3"], ["t1", "t2", "t3"])
    titled, untitled = finish(fig)["layout"], finish(plain)["layout"]
    assert titled["yaxis"]["title"]["text"] and titled["margin"]["l"] >= untitled["margin"]["l"] + 14


def test_the_app_sends_finished_figures(minilm) -> None:
    at = run_app(view="Heads")
    assert at.get("plotly_chart") and all(c.proto.theme == "" for c in at.get("plotly_chart"))  # theme=None
    for spec in specs(at):
        layout = spec["layout"]
        assert "template" not in layout and layout["datarevision"] == DATA_REVISION  # the look is in the figure
        assert all(layout[k]["automargin"] is False for k in layout if k.startswith(("xaxis", "yaxis")))
        assert layout["margin"]["l"] > 10 or not any(k.startswith("yaxis") for k in layout)


def test_the_look_fills_only_what_the_figure_leaves() -> None:
    """figures.look is a template's rule written into the figure: the figure's own values win, every axis and
    colour axis gets the axis look, a trace gets the blue scale only when it has neither a scale nor a colour axis,
    titles are bold, and the look's constants are never shared or changed."""
    before = json.dumps([look.LAYOUT, look.X_AXIS, look.Y_AXIS, look.COLOR_AXIS, look.TRACES])
    fig = go.Figure(
        [
            go.Heatmap(z=[[1, 2]], xaxis="x2", yaxis="y2"),
            go.Heatmap(z=[[1, 2]], colorscale="Reds"),
            go.Heatmap(z=[[1, 2]], coloraxis="coloraxis"),
        ],
        layout={"title": "Heads & <i>tokens</i>", "font": {"size": 15}, "xaxis2": {"tickfont": {"color": "red"}}},
    )
    spec = finish(fig)
    layout, data = spec["layout"], spec["data"]
    assert layout["title"]["text"] == "Heads & <i>tokens</i>" and layout["title"]["font"]["weight"] == 700
    assert layout["font"]["size"] == 15 and layout["font"]["family"] == look.FONT  # its own size, the look's font
    assert layout["xaxis2"]["tickfont"] == {"color": "red", "size": 12} and layout["yaxis2"]["gridcolor"] == look.LINE
    assert layout["xaxis"]["tickfont"]["color"] == look.GREY
    assert data[0]["colorscale"] == look.SEQUENTIAL and data[1]["colorscale"] != look.SEQUENTIAL
    assert "colorscale" not in data[2] and layout["coloraxis"]["colorbar"]["thickness"] == 16
    go.Figure(**spec)  # Plotly's own checks accept every value the look adds
    layout["xaxis"]["tickfont"]["color"] = "blue"
    assert json.dumps([look.LAYOUT, look.X_AXIS, look.Y_AXIS, look.COLOR_AXIS, look.TRACES]) == before


def test_vectors_are_sent_as_plain_lists() -> None:
    """A 1-D numeric array reaches plotly.js as a plain list (a typed one counts as changed in Plotly.react, and the
    chart is drawn twice, see finish._plain_vectors), nested ones too; 2-D arrays stay typed; the numbers are the
    same, float32 widened exactly."""
    y = np.array([0.1, 2.5, -3.25], dtype=np.float32)
    fig = go.Figure(
        [
            go.Bar(x=["a", "b", "c"], y=y, customdata=np.arange(3), marker={"color": y}),
            go.Heatmap(z=np.ones((2, 3), dtype=np.float32)),
        ]
    )
    bar, heat = finish(fig)["data"]
    assert bar["y"] == [float(v) for v in y] and bar["customdata"] == [0, 1, 2]
    assert bar["marker"]["color"] == bar["y"] and np.asarray(bar["y"], dtype=np.float32).tobytes() == y.tobytes()
    assert isinstance(heat["z"], dict) and "bdata" in heat["z"]  # compact, and plotly.js gets rows in an array


@pytest.mark.parametrize(
    ("view", "halves", "text"),
    [("Compare heads", 4, None), ("W^O", 2, None), ("Masks", 2, " ".join(["The animal was tired."] * 12))],
)
def test_half_row_titles_break_into_lines_and_are_never_cut(view: str, halves: int, text: str | None, minilm) -> None:
    """Issue 35 §2.8: a figure drawn two to a row showed "… between heads (similar heads" and cut the rest (Compare
    heads; the W^O pair too). Every line of such a title fits HALF_ROW_TITLE_CHARS, and no word is lost."""
    import html
    import re

    from mha_viz.figures.heatmap import HALF_ROW_TITLE_CHARS

    at = run_app(view=view, layer="3", **({"text": text} if text else {}))
    halves_drawn = (
        panels(at)[:halves]  # the W^O pair is one chart: its panels' titles (figures.wo_pair)
        if view == "W^O"
        else [(s["layout"]["title"]["text"], s) for s in specs(at)[:halves]]
    )
    for title, spec in halves_drawn:
        lines = [html.unescape(re.sub(r"<[^>]*>", "", t)) for t in title.split("<br>")]
        assert all(len(t) <= HALF_ROW_TITLE_CHARS for t in lines), lines
        assert spec["layout"]["margin"]["t"] >= 50 + 18 * (len(lines) - 1) - 1  # room for every line
    if view == "Compare heads":
        assert "(similar heads sit together)" in " ".join(specs(at)[3]["layout"]["title"]["text"].split("<br>"))

"""Readable everywhere: masked scores say −∞, steps are numbered by the seven steps, biases are named, Compare
shares one colour scale and shows every key label, many-head grids keep their labels legible, no "1 heads"."""

from __future__ import annotations

import re

import numpy as np
import torch
from apptest_helpers import array, assert_clean, heatmaps, panels, run_app, specs

from mha_viz.analysis.steps import Step, numbered, scale_title
from mha_viz.figures import heads_grid, matrix_heatmap
from mha_viz.figures.common import GRID_WIDTH_PX, LABEL_PX, plural

STEP = re.compile(r"^(\d)([a-z]?)\. ")


def titles_of(at) -> list[str]:
    return [title for title, _ in panels(at)]


def step_spec(at, prefix: str) -> dict:
    (spec,) = [s for title, s in panels(at) if title.startswith(prefix)]
    return spec


def test_masked_scores_hover_says_minus_infinity(minilm) -> None:
    at = run_app(view="Step by step", causal="true")
    assert_clean(at)
    spec = step_spec(at, "5. mask")
    main, *layers = heatmaps(spec)
    (masked,) = layers  # only −∞ cells here: one grey layer
    z = array(masked["z"]).reshape(15, 15)
    future = np.triu(np.ones((15, 15), dtype=bool), 1)
    np.testing.assert_array_equal(~np.isnan(z), future)  # the layer covers exactly the causally masked keys
    assert "−∞" in masked["hovertemplate"] and "NaN" not in masked["hovertemplate"]
    assert main["hoverongaps"] is False  # the gaps (masked cells) never hover as the main trace's "NaN"
    scores = array(main["z"]).reshape(15, 15)
    assert np.isnan(scores[future]).all() and np.isfinite(scores[~future]).all()
    for s in specs(at):
        assert "NaN" not in str(s["layout"]) and all("NaN" not in str(t.get("hovertemplate")) for t in s["data"])


def test_matrix_heatmap_names_every_kind_of_non_number() -> None:
    z = np.array([[1.0, -np.inf], [np.inf, np.nan]], dtype=np.float32)
    fig = matrix_heatmap(z, ["a", "b"], ["a", "b"], "t", diverging=True)
    layers = {t.name: np.asarray(t.z, dtype=float) for t in fig.data[1:]}
    assert set(layers) == {"−∞ (masked)", "+∞", "not a number"}
    for name, cell in (("−∞ (masked)", (0, 1)), ("+∞", (1, 0)), ("not a number", (1, 1))):
        assert np.isfinite(layers[name]).sum() == 1 and np.isfinite(layers[name][cell]), name
    assert all(name in t.hovertemplate for t, name in zip(fig.data[1:], layers, strict=True))
    assert fig.data[0].zmin == -1.0 and fig.data[0].zmax == 1.0  # the scale comes from the finite values


def test_step_titles_follow_the_seven_steps(minilm) -> None:
    at = run_app(view="Step by step", step_head="head 0")  # (the opened head by default: the found one, 11)
    assert_clean(at)
    keys = [STEP.match(t).groups() for t in titles_of(at)]  # every title numbered
    assert [int(n) for n, _ in keys] == sorted(int(n) for n, _ in keys)  # in order
    assert len(set(keys)) == len(keys)  # no repeats
    assert {int(n) for n, _ in keys} == set(range(1, 8))  # all seven steps
    for number in {n for n, _ in keys}:
        letters = [letter for n, letter in keys if n == number]
        assert letters == ([""] if len(letters) == 1 else list("abcdefg"[: len(letters)]))
    titles = titles_of(at)
    assert titles[1].startswith("2a. Q_0") and titles[2].startswith("2b. K_0") and titles[3].startswith("2c. V_0")
    assert titles[4].startswith("3. Q_0 K_0ᵀ") and titles[5].startswith("4. ÷ √d_k = ÷ √32")
    assert titles[6].startswith("5. mask") and titles[7].startswith("6. softmax") and titles[8].startswith("7a.")


def test_numbering_with_rotary_soft_cap_and_position_bias() -> None:
    z = np.zeros((1, 1))
    parts = [1, 2, 2, 2, 2, 2, 3, 4, 4, 4, 5, 6, 7, 7, 7]  # rotary (Q, K before and after), soft-cap, bias
    got = numbered([Step(p, f"m{j}", z, False, "v", True, "") for j, p in enumerate(parts)])
    prefixes = [t.split(" ")[0] for t in got]
    assert prefixes == ["1.", "2a.", "2b.", "2c.", "2d.", "2e.", "3.", "4a.", "4b.", "4c.", "5.", "6.", "7a.", "7b.",
                        "7c."]  # fmt: skip
    assert scale_title(32**-0.5, 32, True).startswith("÷ √d_k")
    assert "not 1/√d_k" in scale_title(1.0, 64, True) and "scaling off" in scale_title(1.0, 32, False)


def test_biases_are_named_where_the_layer_has_them(minilm) -> None:
    titles = titles_of(run_app(view="Step by step", step_head="head 0"))
    assert any(t.startswith("2a. Q_0 = X · W_Q[0] + b_Q[0]") for t in titles), titles
    assert any(t.startswith("2b. K_0 = X · W_K[0] + b_K[0]") for t in titles)
    assert any(t.startswith("2c. V_0 = X · W_V[0] + b_V[0]") for t in titles)
    assert any(t.startswith("7c. output = concat · W^O + b_O") for t in titles)
    own = run_app(src="Own weights", view="Step by step", d_model="64", own_heads="4")  # own weights: no bias
    assert_clean(own)
    titles = titles_of(own)
    assert any(t.startswith("2a. Q_0 = X · W_Q[0]") for t in titles) and not any("+ b_" in t for t in titles)


def test_compare_heads_share_one_scale_and_every_key_label(minilm) -> None:
    at = run_app(view="Compare heads", b_head="5")
    assert_clean(at)
    a, b = (heatmaps(s)[0] for s in specs(at)[:2])
    za, zb = array(a["z"]), array(b["z"])
    assert a["zmin"] == b["zmin"] == 0.0
    assert a["zmax"] == b["zmax"] == np.float32(max(za.max(), zb.max()))
    assert not np.isclose(za.max(), zb.max())  # two heads with different peaks: the shared scale matters here
    for s in specs(at)[:2]:
        keys = list(heatmaps(s)[0]["x"])
        assert len(keys) == 15 and list(s["layout"]["xaxis"]["tickvals"]) == keys
        assert list(s["layout"]["yaxis"]["tickvals"]) == list(heatmaps(s)[0]["y"])


def test_long_axes_are_thinned_and_say_so() -> None:
    labels = [f"tok{i}" for i in range(400)]
    fig = matrix_heatmap(np.random.default_rng(0).random((400, 400)), labels, labels, "t", width=520)
    x = fig.layout.xaxis
    k = labels.index(x.tickvals[1])  # every k-th label, from the first
    assert 1 < len(x.tickvals) <= (520 - 220) / LABEL_PX and list(x.tickvals) == labels[::k]
    assert "every" in x.title.text and "hover" in x.title.text
    assert list(fig.data[0].x) == labels  # every cell keeps its token for the hover


def test_tick_values_are_escaped_like_the_labels() -> None:
    labels = ["<b>x</b>", "a&b"]
    fig = matrix_heatmap(np.eye(2), labels, labels, "t")
    assert list(fig.layout.xaxis.tickvals) == list(fig.data[0].x) == ["&lt;b&gt;x&lt;/b&gt;", "a&amp;b"]


def _panel_px(fig, axis: str, length: float) -> float:
    lo, hi = fig.layout[axis].domain
    return (hi - lo) * length


def test_many_head_grids_keep_labels_legible() -> None:
    rng = np.random.default_rng(0)
    tokens = [f"word{i}" for i in range(15)]
    for heads, cols in ((12, 4), (32, 8), (64, 8)):
        p = torch.softmax(torch.from_numpy(rng.normal(size=(heads, 15, 15))), -1).numpy()
        fig = heads_grid(p, tokens, titles=[f"head {i} · previous token" for i in range(heads)], cols=cols)
        for name in [k for k in fig.layout if k.startswith("xaxis")]:
            ticks = fig.layout[name].tickvals
            assert len(ticks) * LABEL_PX <= _panel_px(fig, name, GRID_WIDTH_PX) + 1e-6, (heads, name, len(ticks))
            assert fig.layout[name].ticks == ""
        for name in [k for k in fig.layout if k.startswith("yaxis")]:
            ticks = fig.layout[name].tickvals
            assert len(ticks) * LABEL_PX <= _panel_px(fig, name, fig.layout.height), (heads, name, len(ticks))
            assert len(ticks) == 15  # the panels are tall enough for every query label at 15 tokens
        for ann in fig.layout.annotations:  # panel titles fit their panel (about 6.5 px a character)
            assert len(ann.text) * 6.5 <= GRID_WIDTH_PX / cols + 6.5
        assert [t.meta for t in fig.data if t.type == "heatmap"][5] == "head 5 · previous token"  # hover: in full


def test_head_count_at_one_head_is_singular(minilm) -> None:
    at = run_app(view="Head count", hc="1")
    assert_clean(at)
    text = " ".join(str(e.value) for e in (*at.caption, *at.markdown, *at.warning, *at.info))
    assert "re-split into 1 head of d_k = 384" in text
    assert not re.search(r"\b1 (heads|tokens|layers)\b", text)
    assert len(heatmaps(specs(at)[0])) == 1
    assert plural(1, "head") == "1 head" and plural(64, "head") == "64 heads"


def test_head_count_grid_at_64_heads(minilm) -> None:
    at = run_app(view="Head count", hc="64")
    assert_clean(at)
    spec = specs(at)[0]
    assert len(heatmaps(spec)) == 64
    for name, axis in spec["layout"].items():
        if name.startswith("xaxis"):
            lo, hi = axis["domain"]
            assert len(axis["tickvals"]) * LABEL_PX <= (hi - lo) * GRID_WIDTH_PX + 1e-6


def test_overview_title_is_singular_for_one_layer_and_head() -> None:
    from mha_viz.figures import overview

    assert "1 layer × 1 head" in overview(np.full((1, 1, 3, 3), 1 / 3)).layout.title.text
    assert "2 layers × 3 heads" in overview(np.full((2, 3, 3, 3), 1 / 3)).layout.title.text

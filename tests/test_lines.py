"""The Lines tab and its figure: each drawn line is one weight of the pattern, and only those above the threshold."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest
from apptest_helpers import array, assert_clean, ignored_note, run_app
from texts import PAYLOADS

from conftest import SENTENCE
from mha_viz.config import Config
from mha_viz.figures import (
    LINE_THRESHOLD,
    MAX_ROWS,
    MAX_SEGMENTS,
    attention_lines,
    line_chart,
    select_lines,
    strongest_head,
    token_window,
)
from mha_viz.figures.lines import LEVELS, ROW_PX
from mha_viz.pipeline.road import traces
from mha_viz.ui.views.lines import lines_csv

# a hand-made pattern: 2 heads, 4 queries, 4 keys (rows need not sum to 1 for the figure)
HAND = np.asarray(
    [
        [[0.5, 0.0, 0.49, 0.01], [0.0, 1.0, 0.0, 0.0], [0.2, 0.3, 0.005, 0.495], [0.25, 0.25, 0.25, 0.25]],
        [[0.0, 0.0, 0.0, 1.0], [0.125, 0.126, 0.0, 0.749], [0.9, 0.0999, 0.0001, 0.0], [0.0, 0.0, 0.0, 0.0]],
    ],
    dtype=np.float32,
)  # [2, 4, 4]
LABELS = ("[CLS]", "<b>x</b>", "it", "[SEP]")


def spec_of(fig) -> dict:
    return json.loads(fig.to_json()) if not isinstance(fig, dict) else fig


def line_traces(spec: dict) -> list[dict]:
    return [d for d in spec["data"] if d.get("mode") == "lines" and d.get("customdata") is not None]


def token_traces(spec: dict) -> dict[str, dict]:
    return {d["name"]: d for d in spec["data"] if d.get("mode") == "markers+text"}


def drawn(spec: dict) -> dict[tuple[int, int, int], float]:
    """(head, query, key) -> weight for every line of the figure, read back from its traces (window offsets
    from the token traces' customdata, which holds each token's index)."""
    tokens = token_traces(spec)
    q0 = int(tokens["query tokens"]["customdata"][0][0])
    k0 = int(tokens["key tokens"]["customdata"][0][0])
    out: dict[tuple[int, int, int], float] = {}
    for d in line_traces(spec):
        head = int(d["name"].removeprefix("head "))
        x, y, w = array(d["x"]), array(d["y"]), array(d["customdata"])
        assert x.size == y.size == w.size and x.size % 3 == 0
        x, y, w = x.reshape(-1, 3), y.reshape(-1, 3), w.reshape(-1, 3)
        assert np.all(x[:, 0] == 0) and np.all(x[:, 1] == 1) and np.all(np.isnan(x[:, 2]) & np.isnan(y[:, 2]))
        assert np.array_equal(w[:, 0], w[:, 1])
        for (q, k, _), wt in zip(y, w[:, 0], strict=True):
            key = (head, int(q) + q0, int(k) + k0)
            assert key not in out, f"line {key} drawn twice"
            out[key] = float(wt)
    return out


def expected(pattern: np.ndarray, heads, rows=None, keys=None, threshold=LINE_THRESHOLD) -> dict:
    rows = range(pattern.shape[1]) if rows is None else rows
    keys = range(pattern.shape[2]) if keys is None else keys
    return {
        (h, q, k): float(pattern[h, q, k])
        for h in heads
        for q in rows
        for k in keys
        if pattern[h, q, k] >= threshold and pattern[h, q, k] > 0
    }


def alpha(trace: dict) -> float:
    return float(re.fullmatch(r"rgba\((\d+),(\d+),(\d+),([\d.]+)\)", trace["line"]["color"]).group(4))


def rgb(trace: dict) -> str:
    return re.match(r"rgba?\((\d+,\d+,\d+)", trace["line"]["color"]).group(1)


# --- the figure ------------------------------------------------------------------------------------------------


def test_lines_are_the_weights_above_the_threshold() -> None:
    spec = spec_of(attention_lines(HAND, LABELS, LABELS, select_lines(HAND, [0, 1]), "hand"))
    got = drawn(spec)
    assert got == expected(HAND, [0, 1])  # exact float32 values, every one at or above 0.01, none below
    assert (0, 0, 1) not in got and (1, 3, 0) not in got  # zero weights draw nothing
    assert (0, 2, 2) not in got and (1, 2, 2) not in got  # 0.005 and 0.0001: under the threshold
    assert got[(0, 0, 3)] == pytest.approx(0.01)  # the threshold itself is drawn
    assert "weight ≥ 0.01" in spec["layout"]["annotations"][0]["text"]


def test_opacity_follows_the_weight_in_steps() -> None:
    spec = spec_of(attention_lines(HAND, LABELS, LABELS, select_lines(HAND, [0, 1]), "hand"))
    levels = set()
    for d in line_traces(spec):
        a = alpha(d)
        w = array(d["customdata"]).reshape(-1, 3)[:, 0]
        assert np.all(np.abs(w - a) <= 0.5 / LEVELS + 1e-6), (a, w)  # the bucket's midpoint
        levels.add(a)
    assert len(levels) >= 5  # weights 0.01 … 1 fall in several steps: opacity tells them apart
    order = [alpha(d) for d in line_traces(spec)]
    assert order == sorted(order)  # faint lines first, so strong ones are drawn on top


def test_one_colour_per_head_and_a_legend_naming_them() -> None:
    stack = np.concatenate([HAND] * 6)  # 12 heads
    spec = spec_of(attention_lines(stack, LABELS, LABELS, select_lines(stack, range(12)), "all"))
    legend = [d for d in spec["data"] if d.get("showlegend") is not False and d.get("mode") == "lines"]
    assert [d["name"] for d in legend] == [f"head {i}" for i in range(12)]
    assert len({rgb(d) for d in legend}) == 12
    for d in line_traces(spec):  # each line has its head's colour
        assert rgb(d) == rgb(legend[int(d["name"].removeprefix("head "))])


def test_focus_draws_only_that_query() -> None:
    ls = select_lines(HAND, [0, 1], focus=2)
    spec = spec_of(attention_lines(HAND, LABELS, LABELS, ls, "focus"))
    assert drawn(spec) == expected(HAND, [0, 1], rows=[2])
    assert set(ls.query.tolist()) == {2}
    sizes = token_traces(spec)["query tokens"]["marker"]["size"]
    assert sizes[2] > sizes[0]  # the focus token is marked


def test_segment_cap_keeps_the_largest_and_says_so() -> None:
    ls = select_lines(HAND, [0, 1], max_segments=5)
    full = expected(HAND, [0, 1])
    kept = {(int(h), int(q), int(k)): float(w) for h, q, k, w in zip(ls.head, ls.query, ls.key, ls.weight, strict=True)}
    assert len(kept) == 5 and ls.capped == len(full) - 5
    assert min(kept.values()) >= max(v for key, v in full.items() if key not in kept)
    assert all(full[key] == v for key, v in kept.items())


def test_labels_are_escaped_and_hover_lists_weights() -> None:
    spec = spec_of(attention_lines(HAND, LABELS, LABELS, select_lines(HAND, [1]), "t"))
    q = token_traces(spec)["query tokens"]
    assert "&lt;b&gt;x&lt;/b&gt;" in q["text"] and "<b>x</b>" not in json.dumps(q["text"])
    assert q["customdata"][1][2] == "head 1: [SEP] 0.749 · &lt;b&gt;x&lt;/b&gt; 0.126 · [CLS] 0.125"


def test_windows_and_helpers() -> None:
    assert token_window(15, 7) == (0, 15)
    assert token_window(400, 0) == (0, MAX_ROWS) and token_window(400, 399) == (400 - MAX_ROWS, 400)
    assert token_window(400, 200) == (200 - MAX_ROWS // 2, 200 + MAX_ROWS // 2)
    p = np.zeros((3, 4, 4), dtype=np.float32)
    p[2, 2, 1] = 0.7
    p[1, 2, 1] = 0.6
    assert strongest_head(p, ["a", "animal", "it", "b"], ["a", "animal", "it", "b"]) == 2
    assert strongest_head(p, ["a", "b", "c", "d"], ["a", "b", "c", "d"]) == 0
    ls = select_lines(HAND, [0], windows=((1, 3), (0, 2)))
    assert drawn(spec_of(attention_lines(HAND, LABELS, LABELS, ls, "w"))) == expected(HAND, [0], [1, 2], [0, 1])
    assert callable(line_chart) and line_chart.__module__ == "mha_viz.figures.bars"  # no clash with figures.lines


def test_csv_holds_the_drawn_weights() -> None:
    ls = select_lines(HAND, [0, 1])
    rows = list(csv.reader(io.StringIO(lines_csv(ls, LABELS, LABELS).decode())))
    assert rows[0] == ["query", "key", "head", "weight"]
    got = {(int(r[2]), LABELS.index(r[0]), LABELS.index(r[1])): np.float32(r[3]) for r in rows[1:]}
    assert got == {key: np.float32(w) for key, w in expected(HAND, [0, 1]).items()}  # float32 round trip


# --- the tab, with the real bundled model ------------------------------------------------------------------------


def lines_spec(at) -> dict:
    (chart,) = at.get("plotly_chart")  # the tab's one figure
    return json.loads(chart.proto.spec)


def test_lines_tab_draws_the_models_weights(minilm) -> None:
    at = run_app(view="Lines", layer="0")
    assert_clean(at)
    _, _, (trace,) = traces(Config(), SENTENCE, layers=[0], lm=minilm)
    pattern = trace.pattern.numpy()  # [12, n, n]
    labels = list(trace.tokens)
    head = int(np.argmax(pattern[:, labels.index("it"), labels.index("animal")]))
    assert at.multiselect(key="lines_heads").value == [head]
    assert drawn(lines_spec(at)) == pytest.approx(expected(pattern, [head]), abs=1e-6)
    at.multiselect(key="lines_heads").set_value([1, 4]).run()
    at.selectbox(key="lines_focus").set_value("it").run()
    assert_clean(at)
    want = expected(pattern, [1, 4], rows=[labels.index("it")])
    assert drawn(lines_spec(at)) == pytest.approx(want, abs=1e-6)
    assert want and all(w >= LINE_THRESHOLD for w in want.values())


def test_unknown_focus_and_heads_in_the_link_are_reported(minilm) -> None:
    at = run_app(view="Lines", lines_focus="notatoken", lines_heads=["head 2", "head 99"])
    assert_clean(at)
    note = ignored_note(at)
    assert "lines_focus=notatoken (this text's tokens are" in note and "showing (all tokens)" in note
    assert "lines_heads=head 99 (the heads are head 0" in note
    assert at.selectbox(key="lines_focus").value == "(all tokens)"
    assert at.multiselect(key="lines_heads").value == [2]
    assert line_traces(lines_spec(at))


def test_long_text_stays_within_the_caps(minilm) -> None:
    text = " ".join([SENTENCE] * 30)  # 392 tokens
    at = run_app(view="Lines", text=text, lines_heads=[f"head {i}" for i in range(12)], layer="0")
    assert_clean(at)
    spec = lines_spec(at)
    tokens = token_traces(spec)
    n_q, n_k = len(tokens["query tokens"]["text"]), len(tokens["key tokens"]["text"])
    assert n_q == n_k == MAX_ROWS
    got = drawn(spec)
    assert 0 < len(got) <= MAX_SEGMENTS
    assert spec["layout"]["height"] <= ROW_PX * MAX_ROWS + 130
    assert f"queries 0–{MAX_ROWS - 1} of 392" in spec["layout"]["annotations"][0]["text"]
    _, _, (trace,) = traces(Config(), text, layers=[0], lm=minilm)
    pattern = trace.pattern.numpy()
    assert got == pytest.approx(expected(pattern, range(12), range(MAX_ROWS), range(MAX_ROWS)), abs=1e-6)
    focus = next(i for i, t in enumerate(trace.tokens) if i >= 200 and t.startswith("it ("))
    at.selectbox(key="lines_focus").set_value(trace.tokens[focus]).run()  # a focus moves the window around it
    assert_clean(at)
    got = drawn(lines_spec(at))
    start = focus - MAX_ROWS // 2
    assert {q for _, q, _ in got} == {focus}
    assert got == pytest.approx(expected(pattern, range(12), [focus], range(start, start + MAX_ROWS)), abs=1e-6)


@pytest.mark.parametrize(
    ("custom", "focus"),
    [([2, "query", "head 0: …"], "it"), ({"0": 1, "1": "query"}, "<b>x</b>"), ([3, "key", "head 0: …"], None)],
)
def test_click_on_a_query_token_makes_it_the_focus(custom, focus, monkeypatch) -> None:
    """The chart's selection event (customdata: token index, side, hover lines) sets the focus selectbox;
    a click on a key token (right column) changes nothing."""
    from types import SimpleNamespace

    import mha_viz.ui.choices as choices
    import mha_viz.ui.opened as opened
    import mha_viz.ui.views.lines as view

    state = {"lines_fig": SimpleNamespace(selection=SimpleNamespace(points=[{"customdata": custom}]))}
    fake = SimpleNamespace(session_state=state, query_params={})
    monkeypatch.setattr(choices, "st", fake)
    monkeypatch.setattr(opened, "st", fake)
    monkeypatch.setattr(view, "st", fake)
    view._on_click(LABELS)
    assert state.get("lines_focus") == focus


def test_cross_attention_draws_decoder_tokens_left_and_source_tokens_right(t5_dir: str) -> None:
    t5 = {"src": "Hugging Face", "model_id": t5_dir, "target": "The animal was tired", "part": "cross-attention"}
    at = run_app(view="Lines", lines_heads=["head 0", "head 1"], hide_special="true", **t5)
    assert_clean(at)
    spec = lines_spec(at)
    tokens = token_traces(spec)
    left, right = tokens["query tokens"]["text"], tokens["key tokens"]["text"]
    assert len(left) != len(right)  # decoder tokens × source tokens
    got = drawn(spec)
    assert got and {h for h, _, _ in got} <= {0, 1}
    assert max(q for _, q, _ in got) < len(left) and max(k for _, _, k in got) < len(right)


def test_hidden_special_tokens_are_left_out_and_rows_renormalised(minilm) -> None:
    at = run_app(view="Lines", hide_special="true", lines_heads=["head 2", "head 5"], layer="0")
    assert_clean(at)
    spec = lines_spec(at)
    _, _, (trace,) = traces(Config(), SENTENCE, layers=[0], lm=minilm)
    keep = [i for i, t in enumerate(trace.tokens) if t not in ("[CLS]", "[SEP]")]
    sub = trace.pattern.numpy()[:, keep][:, :, keep].astype(np.float64)  # by hand: drop, then renormalise rows
    sub /= sub.sum(-1, keepdims=True)
    assert token_traces(spec)["query tokens"]["text"] == [trace.tokens[i] for i in keep]
    assert drawn(spec) == pytest.approx(expected(sub, [2, 5]), abs=1e-6)


def test_long_text_window_from_the_link(minilm) -> None:
    text = " ".join([SENTENCE] * 30)
    at = run_app(view="Lines", text=text, lines_start="100")
    assert_clean(at)
    spec = lines_spec(at)
    assert ignored_note(at) == ""
    assert "queries 100–179 of 392; keys 100–179 of 392" in spec["layout"]["annotations"][0]["text"]
    assert token_traces(spec)["query tokens"]["customdata"][0][0] == 100
    at = run_app(view="Lines", text=text, lines_start="9999")
    assert "lines_start=9999 (must be a whole number from 0 to 312; showing 0)" in ignored_note(at)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_labels_stay_text(payload: str) -> None:
    """As tests/test_security.py checks for the other figures: no tag from a token reaches Plotly unescaped."""
    tokens = ["[CLS]", payload, "it", "[SEP]"]
    p = np.full((2, 4, 4), 0.25, dtype=np.float32)
    fig = attention_lines(p, tokens, tokens, select_lines(p, [0, 1], focus=1), f"title with {payload}")
    spec = spec_of(fig)
    texts = json.dumps(spec["data"]) + json.dumps(spec["layout"].get("annotations", []))
    texts += json.dumps(spec["layout"].get("title", {}))
    for tag in ("<img", "<svg", "<a ", "<span"):
        assert tag not in texts.replace("<extra>", "").replace("</extra>", ""), (tag, payload)
    assert "&lt;" in texts or "<" not in payload


def test_beside_the_lines_a_table_of_the_strongest_ones_fills_the_row(minilm) -> None:
    """Issue 35 §2.8: the figure sat in three fifths of the row and the rest stayed empty. Now the other two fifths
    hold the heaviest lines drawn (query, key, head, weight), heaviest first: the figure's own numbers."""
    from mha_viz.ui.views.lines import TOP_LINES

    at = run_app(view="Lines", layer="0", lines_heads=["head 1", "head 4"])
    assert_clean(at)
    got = at.dataframe[0].value  # a pandas frame, as Streamlit hands it to the page
    lines = drawn(lines_spec(at))  # {(head, query, key): weight} of every line drawn
    heaviest = sorted(lines.items(), key=lambda kv: -kv[1])[:TOP_LINES]
    assert len(got) == TOP_LINES and list(got.columns) == ["query", "key", "head", "weight"]
    _, _, (trace,) = traces(Config(), SENTENCE, layers=[0], lm=minilm)
    labels = list(trace.tokens)
    want = [(labels[q], labels[k], h, round(w, 3)) for (h, q, k), w in heaviest]
    rows = [(r.query, r.key, int(r.head), float(r.weight)) for r in got.itertuples()]
    assert [r[3] for r in rows] == sorted((r[3] for r in rows), reverse=True)  # heaviest first
    assert sorted(rows) == sorted(want)

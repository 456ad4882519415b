"""Issue 36 §6, tab switches at the floor: W^O's two matrices and Two sentences' two patterns are each ONE chart of
two panels (figures.wo_pair, figures.two_patterns), not two charts; the Variants tab's two figures are kept finished.
The combined charts hold exactly the matrices the two charts held: the model's W^O (pooled as wo_heatmap pools it)
and the W^O in use, each sentence's pattern of the shown head, as the pipeline computes them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import array, assert_clean, heatmaps, new_app, run_app, specs

from conftest import SENTENCE
from mha_viz.config import Config
from mha_viz.edits import wo_matrix
from mha_viz.figures.finish import finish
from mha_viz.figures.heatmap import matrix_spec
from mha_viz.figures.lesson import wo_heatmap
from mha_viz.figures.two_patterns import two_patterns
from mha_viz.figures.wo_pair import WO_PAIR, wo_pair
from mha_viz.pipeline.layer import layer_trace
from mha_viz.pipeline.road import record

pytestmark = pytest.mark.usefixtures("loaded_once")  # the page takes the worker's models


def _trace(lm, text: str, layer: int):
    return layer_trace(lm, record(lm, text), "encoder", layer, Config())


def _panel(spec: dict, axis: str) -> dict:
    (trace,) = [t for t in heatmaps(spec) if t.get("xaxis", "x") == axis]
    return trace


def test_wo_pair_holds_the_layers_wo_and_the_wo_in_use(minilm) -> None:
    t = _trace(minilm, SENTENCE, 3)
    learned = t.W_O.numpy()  # [12, 32, 384]
    identity = wo_matrix(t.W_O, "identity").numpy()
    fig, note = wo_pair(learned, identity, ("W^O of layer 3 (learned)", "W^O in use: identity"))
    spec = finish(fig)
    assert spec["layout"]["meta"] == WO_PAIR and len(heatmaps(spec)) == 2  # one chart, two panels
    for axis, w, title in (("x", learned, "W^O of layer 3 (learned)"), ("x2", identity, "W^O in use: identity")):
        alone = finish(wo_heatmap(w, title)[0])["data"][0]  # the chart it was drawn as before
        panel = _panel(spec, axis)
        np.testing.assert_array_equal(array(panel["z"]), array(alone["z"]))  # the very same cells
        assert panel["hovertemplate"] == alone["hovertemplate"]
        assert (panel["zmin"], panel["zmax"]) == (alone["zmin"], alone["zmax"])  # its own colour scale
    # and those cells are W^O's 2 × 2 block means (384 × 384 > MAX_WO_CELLS a side), from torch
    full = t.W_O.double().reshape(384, 384)
    pooled = full.reshape(192, 2, 192, 2).mean((1, 3)).numpy()
    np.testing.assert_allclose(array(_panel(spec, "x")["z"]), pooled, atol=1e-6)
    eye = torch.eye(384, dtype=torch.float64).reshape(192, 2, 192, 2).mean((1, 3)).numpy()
    np.testing.assert_allclose(array(_panel(spec, "x2")["z"]), eye, atol=1e-7)
    assert [a["text"].split(" · ")[0] for a in spec["layout"]["annotations"]] == [
        "W^O of layer 3 (learned)",
        "W^O in use: identity",
    ]
    yrefs = [s["yref"] for s in spec["layout"]["shapes"]]
    assert yrefs.count("y") == 11 and yrefs.count("y2") == 11  # the head bands of each panel, on its own axes
    assert "2 × 2 block" in note and note.count("W^O has") == 1  # said once for the two panels


def test_wo_tab_draws_the_pair_as_one_chart(minilm) -> None:
    at = run_app(view="W^O", layer="3")
    assert_clean(at)
    t = _trace(minilm, SENTENCE, 3)
    pair = [s for s in specs(at) if s["layout"].get("meta") == WO_PAIR]
    assert len(pair) == 1 and len(specs(at)) == 2  # before: five charts (each matrix, the bars, the map, the check)
    # the check's matrices only while its expander is open; its result is said without them
    assert [e.label for e in at.expander if e.label.startswith("The check's matrices")]
    assert any("Largest |difference|" in c.value for c in at.caption)
    want = finish(wo_pair(t.W_O.numpy(), wo_matrix(t.W_O, "identity").numpy(), ("a", "b"))[0])
    for axis in ("x", "x2"):
        np.testing.assert_array_equal(array(_panel(pair[0], axis)["z"]), array(_panel(want, axis)["z"]))


def test_wo_change_and_contributions_are_one_chart_of_the_models_values(minilm) -> None:
    """The bars (output change per token, identity W^O against the learned one) and the heads' contribution norms
    under them, on one token axis: each the values torch gives from the layer's trace."""
    at = run_app(view="W^O", layer="3")  # the default what-if: W^O = identity
    assert_clean(at)
    (chart,) = [s for s in specs(at) if s["layout"].get("title", {}).get("text", "").startswith("Output change")]
    base = _trace(minilm, SENTENCE, 3)
    ident = layer_trace(minilm, record(minilm, SENTENCE), "encoder", 3, Config(wo="identity"))
    ref, new = base.output.double(), ident.output.double()  # [15, 384]
    relative, cosine = (t for t in chart["data"] if t["type"] == "bar")
    np.testing.assert_allclose(relative["y"], ((new - ref).norm(dim=-1) / ref.norm(dim=-1)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(cosine["y"], torch.cosine_similarity(new, ref, dim=-1).numpy(), atol=1e-5)
    (norms,) = heatmaps(chart)
    want = torch.einsum("hnk,hkd->hnd", ident.z.double(), ident.W_O.double()).norm(dim=-1)  # [12, 15]
    np.testing.assert_allclose(array(norms["z"]), want.numpy(), rtol=1e-5)
    assert list(norms["x"]) == list(relative["x"]) == list(base.tokens)  # one token axis for the three rows
    assert list(norms["y"]) == [f"head {i}" for i in range(12)]
    names = [a["text"] for a in chart["layout"]["annotations"]]
    assert names[0].startswith("relative change") and "cosine" in names[1] and "contribution" in names[2]


def test_two_patterns_hold_each_sentences_pattern(minilm) -> None:
    second = SENTENCE.replace("tired", "wide")
    ta, tb = _trace(minilm, SENTENCE, 2), _trace(minilm, second, 2)
    pa, pb = ta.pattern[5].numpy(), tb.pattern[5].numpy()  # [15, 15] each
    la, lb = tuple(ta.tokens), tuple(tb.tokens)
    spec = finish(two_patterns(pa, pb, (la, lb), (la, lb), ("first", "second")))
    for axis, p, labels, title in (("x", pa, la, "first"), ("x2", pb, lb, "second")):
        alone = matrix_spec(p, labels, labels, title, value_name="weight", attention=True, width=520)["data"][0]
        panel = _panel(spec, axis)
        np.testing.assert_array_equal(array(panel["z"]), p.astype(np.float32))  # the model's weights, as they are
        assert panel["hovertemplate"] == alone["hovertemplate"] and list(panel["y"]) == list(alone["y"])
    layout = spec["layout"]
    assert layout["yaxis2"]["side"] == "right" and layout["yaxis2"].get("showticklabels") is not False
    assert "wide" in layout["yaxis2"]["ticktext"] and "wide" not in layout["yaxis"]["ticktext"]  # each its own rows
    assert layout["margin"]["r"] >= 7.5 * len("because")  # room for the right panel's labels


def test_two_sentences_tab_draws_both_patterns_as_one_chart(minilm) -> None:
    at = new_app(view="Two sentences")
    at.run()
    assert_clean(at)
    la, he = at.selectbox(key="two_layer").value, at.selectbox(key="two_head").value
    text_b = at.text_input(key="text_b").value
    (pair,) = [s for s in specs(at) if "the second sentence" in str(s["layout"].get("annotations"))]
    for axis, text in (("x", SENTENCE), ("x2", text_b)):
        want = _trace(minilm, text, la).pattern[he].numpy()
        np.testing.assert_allclose(array(_panel(pair, axis)["z"]), want, atol=1e-6)
    titles = [a["text"] for a in pair["layout"]["annotations"]]
    assert titles == [f"Layer {la}, head {he}: the first sentence", f"Layer {la}, head {he}: the second sentence"]


def test_variants_figures_are_kept_finished(minilm) -> None:
    from mha_viz.ui.common import cached_figure

    cached_figure.cache.clear()
    at = new_app(view="Variants")
    at.run()
    assert_clean(at)
    first = specs(at)
    axes = [v for k, v in first[0]["layout"].items() if k.startswith(("xaxis", "yaxis"))]
    assert len(axes) == 16 and not any("matches" in a for a in axes)  # 8 panels, unlinked: one pass less to draw
    assert len({str(a["range"]) for a in axes if a["anchor"].startswith("y")}) == 1  # ...and the same fixed ranges
    kept = cached_figure.cache.total
    assert len(cached_figure.cache._items) >= 2 and kept > 0  # both went into the cache
    at.run()  # a switch back to the tab runs the same page
    assert_clean(at)
    assert cached_figure.cache.total == kept and specs(at) == first  # hits, the same


def test_two_sentences_bars_are_one_chart_of_both_panels(minilm) -> None:
    """Where the focus token's weight goes and its weights on the shared keys: one chart of two panels (two charts
    before), each panel the two sentences' values, recomputed here from each sentence's own pattern."""
    at = new_app(view="Two sentences")
    at.run()
    assert_clean(at)
    la, he = at.selectbox(key="two_layer").value, at.selectbox(key="two_head").value
    (bars,) = [s for s in specs(at) if "attends to (shared keys" in str(s["layout"].get("annotations"))]
    panel = {axis: [t for t in bars["data"] if t.get("xaxis", "x") == axis] for axis in ("x", "x2")}
    assert [len(v) for v in panel.values()] == [2, 2]  # two series (the sentences) in each of the two panels
    assert [t["showlegend"] for t in bars["data"]] == [True, True, False, False]  # one legend for both panels
    dest = [array(t["y"]) for t in panel["x"]]
    np.testing.assert_allclose([d.sum() for d in dest], 1.0, atol=1e-5)  # each sentence's focus row, whole
    trace_a = _trace(minilm, SENTENCE, la)
    keys = panel["x2"][0]["x"]
    labels = list(trace_a.tokens)
    focus = labels.index("it")
    row = trace_a.pattern[he, focus].numpy()
    shared = np.asarray([labels.index(k) for k in keys])
    np.testing.assert_allclose(array(panel["x2"][0]["y"]), row[shared] / row[shared].sum(), atol=1e-5)

"""The Why? view (issue 37) through AppTest on the bundled MiniLM: it opens on the opened head, the focus token and
that row's top two keys, and draws the plan (analysis/why_plan.plan) of the study's split."""

from __future__ import annotations

import numpy as np
from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

from conftest import SENTENCE
from mha_viz.analysis.why_plan import plan
from mha_viz.pipeline.road import encode
from mha_viz.studies.why import LINEARISATION, why_at


def test_why_view_draws_the_plan(minilm) -> None:
    at = run_app(view="Why?", layer="3")
    assert_clean(at)
    assert at.selectbox(key="why_head").value == 1  # the opened (found) head: "it" → "animal"
    assert at.selectbox(key="why_q").value == "it"
    assert at.selectbox(key="why_k").value == "animal"  # its top key
    second = at.selectbox(key="why_v").value
    tokens = encode(minilm, SENTENCE)[0]
    labels = list(tokens.labels)
    w = why_at(minilm, tokens, 3, 1, labels.index("it"), labels.index("animal"), labels.index(second))
    p = plan(w, contrast=True, expand=False, top=12)
    heat, bars = specs(at)
    (h,) = heatmaps(heat)
    assert list(h["y"]) == p["rows"] and list(h["x"]) == p["cols"]
    np.testing.assert_allclose(array(h["z"]).reshape(p["terms"].shape), p["terms"], rtol=1e-6, atol=1e-6)
    assert [t["type"] for t in bars["data"]] == ["bar", "bar"]
    assert sorted(bars["data"][0]["y"]) == sorted(p["q_totals"])
    assert any(c.value == LINEARISATION for c in at.caption)
    said = " ".join(i.value for i in at.info).replace("\\", "")
    assert p["sentence"] in said
    assert [m.value for m in at.metric][:2] == [f"{w.score:.3f}", f"{w.weight:.3f}"]
    at.toggle(key="why_expand").set_value(True).run()
    assert_clean(at)
    (h2,) = heatmaps(specs(at)[0])
    assert any(str(r).startswith("L2H") for r in h2["y"])  # each head on its own
    at.selectbox(key="why_k").set_value("street").run()
    at.selectbox(key="why_v").set_value("animal").run()
    assert_clean(at)
    w2 = why_at(minilm, tokens, 3, 1, labels.index("it"), labels.index("street"), labels.index("animal"))
    shown = [m.value for m in at.metric]
    assert shown[0] == f"{w2.score:.3f}" and shown[2] == f"{w2.score_versus:.3f}" and shown[0] != shown[2]

"""Heavy content that is collapsed is not drawn: the Heads tab's sink panel appears when its expander is opened, with
the shares the trace gives."""

from __future__ import annotations

import numpy as np
from apptest_helpers import array, assert_clean, run_app, specs

from conftest import SENTENCE
from mha_viz.analysis import norms
from mha_viz.config import Config
from mha_viz.pipeline.road import traces

SINK_TITLE = "Share going to"


def _titles(at) -> list[str]:
    return [s["layout"].get("title", {}).get("text", "") for s in specs(at)]


def test_sink_panel_drawn_only_when_opened(minilm) -> None:
    at = run_app(view="Heads", layer="2")
    assert_clean(at)
    assert not [t for t in _titles(at) if t.startswith(SINK_TITLE)]  # closed: nothing drawn, nothing sent
    at.session_state["sinks_open"] = True  # what opening the expander sets
    at.run()
    assert_clean(at)
    (spec,) = [s for s, title in zip(specs(at), _titles(at), strict=True) if title.startswith(SINK_TITLE)]
    _, _, (t,) = traces(Config(), SENTENCE, layers=[2], lm=minilm)
    sink = np.array([tok in ("[CLS]", "[SEP]") for tok in t.key_tokens])
    want = norms.sink_shares(t.pattern.numpy(), norms.contributions(t), sink)
    np.testing.assert_allclose(array(spec["data"][0]["y"]), want["weight"], rtol=1e-5)
    np.testing.assert_allclose(array(spec["data"][1]["y"]), want["contribution"], rtol=1e-5)


def test_focus_bars_drawn_only_when_opened(minilm) -> None:
    """The focus token's bars (the strip's weights again, one bar chart per head) wait in a closed expander."""
    at = run_app(view="Heads", layer="2")
    assert_clean(at)
    assert not [t for t in _titles(at) if t.startswith("Where “")]
    at.session_state["bars_open"] = True  # what opening the expander sets
    at.run()
    assert_clean(at)
    (spec,) = [s for s, title in zip(specs(at), _titles(at), strict=True) if title.startswith("Where “")]
    _, _, (t,) = traces(Config(), SENTENCE, layers=[2], lm=minilm)
    q = list(t.tokens).index(at.selectbox(key="focus").value)
    for h, bar in enumerate(spec["data"]):
        np.testing.assert_allclose(array(bar["y"]), t.pattern[h, q].numpy(), rtol=1e-5)

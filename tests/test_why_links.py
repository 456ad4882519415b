""" "Why?" reached from Heads, Where does it look? and Two sentences (a button that opens the Why? tab on the same
head, query and key: issue 37 §2), and one step of a chain inside Why? (a head among the sources opens the split of
that head's own attention at the token it wrote into). AppTest on the bundled MiniLM; the split against the study."""

from __future__ import annotations

import numpy as np
from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

from conftest import SENTENCE
from mha_viz.analysis.why_plan import head_sources
from mha_viz.pipeline.road import encode
from mha_viz.studies.why import why_at


def _opened_why(at, layer: int, head: int, query: str, key: str, versus: str | None = None) -> None:
    """The page now shows Why? on that layer, head, query and key (and second key), and draws it."""
    assert_clean(at)
    assert at.session_state["view"] == "Why?"
    assert at.selectbox(key="layer").value == layer
    assert at.selectbox(key="why_head").value == head
    assert at.selectbox(key="why_q").value == query
    assert at.selectbox(key="why_k").value == key
    if versus is not None:
        assert at.selectbox(key="why_v").value == versus
    title = specs(at)[0]["layout"]["title"]["text"]  # the split's heatmap
    assert title.startswith(f"Layer {layer}, head {head}: “{query}” → “{key}”")


def test_why_from_heads_opens_the_opened_head_its_focus_and_top_key(minilm) -> None:
    at = run_app(view="Heads", layer="2")
    at.selectbox(key="head").set_value(5).run()
    at.selectbox(key="focus").set_value("was").run()
    strip = next(s for s in specs(at) if "as the query" in (s["layout"].get("title") or {}).get("text", ""))
    (h,) = heatmaps(strip)
    top = list(h["x"])[int(np.argmax(array(h["z"])[5]))]  # head 5's row: the key "was" looks at most
    at.button(key="heads_why").click().run()
    _opened_why(at, 2, 5, "was", top)


def test_why_from_where_opens_the_shown_head_on_its_query_and_key(minilm) -> None:
    at = run_app(view="Where does it look?")
    at.selectbox(key="where_k").set_value("street").run()
    at.selectbox(key="where_layer").set_value(4).run()
    at.selectbox(key="where_head").set_value(7).run()
    q = at.selectbox(key="where_q").value
    at.button(key="where_why").click().run()
    _opened_why(at, 4, 7, q, "street")


def test_why_from_two_sentences_contrasts_the_two_referents(minilm) -> None:
    at = run_app(view="Two sentences")
    first, second = at.selectbox(key="two_c1").value, at.selectbox(key="two_c2").value
    at.selectbox(key="two_c1").set_value(second).run()  # "street" against "animal": not Why?'s own first pair
    at.selectbox(key="two_c2").set_value(first).run()
    la, he = at.selectbox(key="two_layer").value, at.selectbox(key="two_head").value
    focus, c1, c2 = (at.selectbox(key=k).value for k in ("two_focus", "two_c1", "two_c2"))
    assert (c1, c2) == (second, first)
    at.button(key="two_why").click().run()
    _opened_why(at, la, he, focus, c1, c2)
    assert c1 != c2


def test_following_a_head_source_opens_its_own_split(minilm) -> None:
    """MiniLM's opening head (layer 3, head 1: "it" → "animal" against its second key): pick its top head source;
    the tab then splits that head's own score at the token that source wrote into."""
    at = run_app(view="Why?", layer="3")
    assert_clean(at)
    tokens = encode(minilm, SENTENCE)[0]
    labels = list(tokens.labels)
    versus = at.selectbox(key="why_v").value
    w = why_at(minilm, tokens, 3, 1, labels.index("it"), labels.index("animal"), labels.index(versus))
    found = head_sources(w, contrast=True)
    assert found and all(la < 3 for _, la, _, _, _ in found)
    assert len(at.selectbox(key="why_follow").options) == len(found)
    at.selectbox(key="why_follow").set_value(0).run()
    _side, la, he, token, _ = found[0]
    assert_clean(at)
    assert at.selectbox(key="layer").value == la and at.selectbox(key="why_head").value == he
    assert at.selectbox(key="why_q").value == labels[token]
    assert at.selectbox(key="why_follow").value is None  # ready for the next step
    title = specs(at)[0]["layout"]["title"]["text"]
    assert title.startswith(f"Layer {la}, head {he}: “{labels[token]}” → ")

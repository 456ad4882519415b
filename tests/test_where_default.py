"""Where does it look? on a decoder's self-attention opens on a key the query can see, and says so when the
chosen key is one the causal mask hides (issue 21 §1.7). A tiny random BART's decoder part, through AppTest."""

from __future__ import annotations

import pytest
from apptest_helpers import APP
from streamlit.testing.v1 import AppTest

from conftest import _zoo_dir

LINK = {"src": "Hugging Face", "target": "The animal was tired", "part": "decoder self-attention"}


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory) -> str:
    return _zoo_dir(tmp_path_factory, "bart")


def test_decoder_opens_on_a_visible_key_and_names_a_hidden_one(bart_dir: str) -> None:
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in {**LINK, "model_id": bart_dir, "view": "Where does it look?"}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    assert at.sidebar.radio(key="part").value == "decoder"
    q, k = at.selectbox(key="where_q"), at.selectbox(key="where_k")
    assert k.options.index(k.value) <= q.options.index(q.value), (q.value, k.value)  # the query sees the key
    first = at.pills(key="where_top").options[0]  # "1. layer L, head H: w"
    assert not first.endswith(": 0.000"), first
    assert not any("hides" in w.value for w in at.warning)
    assert any("a key this query can see" in c.value for c in at.caption)  # why it opened there
    later = q.options.index(q.value) + 1
    if later == len(q.options):  # the last query sees every key: take an earlier query
        q.set_value(q.options[0]).run()
        later = 1
    at.selectbox(key="where_k").set_value(at.selectbox(key="where_k").options[later]).run()
    assert not at.exception
    said = " ".join(w.value for w in at.warning).replace("\\", "")
    assert "causal mask hides" in said, said


def _clean(at: AppTest) -> None:
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]


def _where_maps(at: AppTest) -> list[dict]:
    import json

    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return [s for s in specs if "every layer × head" in s["layout"].get("title", {}).get("text", "")]


@pytest.mark.parametrize("given", [{"where_layer": "3"}, {"where_head": "0"}, {"where_layer": "3", "where_head": "0"}])
def test_a_link_naming_the_shown_head_opens_it(minilm, given: dict) -> None:
    """Issue 35 §4.6: ?view=Where+does+it+look%3F&where_layer=3 raised KeyError where_layer."""
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in {"view": "Where does it look?", **given}.items():
        at.query_params[k] = v
    at.run()
    _clean(at)
    for key, value in given.items():
        assert at.selectbox(key=key).value == int(value), key
    shown = at.selectbox(key="where_layer").value, at.selectbox(key="where_head").value
    title = f"Layer {shown[0]}, head {shown[1]}: attention weights"
    assert any(t.startswith(title) for t in _titles(at)), _titles(at)  # the shown-head half is drawn
    assert at.pills(key="where_top").options  # and the ranking


def _titles(at: AppTest) -> list[str]:
    import json

    return [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in at.get("plotly_chart")]


def test_decoder_part_after_cross_attention_opens_on_its_own_visible_pair(bart_dir: str) -> None:
    """Issue 35 §2.4: cross-attention opens on a pair (its first decoder token → "animal") that the decoder's causal
    mask hides; choosing the decoder part kept it and drew a map of 0s on a made-up symmetric colour scale."""
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in {**LINK, "part": "cross-attention", "model_id": bart_dir, "view": "Where does it look?"}.items():
        at.query_params[k] = v
    at.run()
    _clean(at)
    at.sidebar.radio(key="part").set_value("decoder").run()
    _clean(at)
    q, k = at.selectbox(key="where_q"), at.selectbox(key="where_k")
    assert k.options.index(k.value) <= q.options.index(q.value), (q.value, k.value)
    assert not any("hides" in w.value for w in at.warning)
    maps = _where_maps(at)
    assert len(maps) == 1 and any(v for row in maps[0]["data"][0]["z"] for v in row if v), maps


def test_a_hidden_pair_draws_no_map_of_zeros(bart_dir: str) -> None:
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in {**LINK, "model_id": bart_dir, "view": "Where does it look?"}.items():
        at.query_params[k] = v
    at.run()
    q = at.selectbox(key="where_q")
    q.set_value(q.options[0]).run()
    at.selectbox(key="where_k").set_value(at.selectbox(key="where_k").options[2]).run()
    _clean(at)
    assert any("causal mask hides" in w.value.replace("\\", "") for w in at.warning)
    assert _where_maps(at) == []  # the warning says every weight is 0; no map with an invented colour scale

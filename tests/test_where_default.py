"""Where does it look? on a decoder's self-attention opens on a key the query can see, and says so when the
chosen key is one the causal mask hides (issue 21 §1.7). A tiny random BART's decoder part, through AppTest."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from conftest import _zoo_dir

APP = str(Path(__file__).resolve().parents[1] / "app.py")
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

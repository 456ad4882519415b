"""Two sentences on an encoder-decoder (issue 21 §1.3) and on a long text (§1.4), through AppTest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from conftest import SENTENCE, _zoo_dir
from mha_viz.analysis.referents import differing_words, replace_word, second_sentence

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TARGET = "The animal was tired"
# A long text that starts with the seed sentence: every "tired" carries its full stop (492 MiniLM tokens).
LONG = " ".join([SENTENCE + "."] * 35)


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory) -> str:
    return _zoo_dir(tmp_path_factory, "bart")


def run_app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def moved_map(at: AppTest) -> dict:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next(s for s in specs if s["layout"].get("title", {}).get("text", "").startswith("Weight "))


def test_words_match_without_their_punctuation() -> None:
    assert replace_word("it was too tired.", "tired", "wide") == "it was too wide."
    assert differing_words("it was too tired.", "it was too wide.") == ("tired", "wide")
    # the first occurrence: the one in the sentence the focus "it" defaults to
    assert second_sentence(LONG, "x").startswith(SENTENCE.replace("tired", "wide") + ". " + SENTENCE + ".")


@pytest.mark.parametrize("part", ["encoder self-attention", "cross-attention"])
def test_encoder_decoder_compares_the_two_source_texts(bart_dir: str, part: str) -> None:
    at = run_app(src="Hugging Face", model_id=bart_dir, target=TARGET, part=part, view="Two sentences")
    clean(at)
    said = " ".join(i.value for i in at.info).replace("\\", "")
    assert "same decoder text" in said and TARGET in said, said
    spec = moved_map(at)
    assert spec["data"][0]["type"] == "heatmap"
    focus = at.selectbox(key="two_focus")
    assert at.sidebar.radio(key="part").value == part.split(" ")[0].split("-")[0]
    if part == "cross-attention":
        assert "source" in said and "decoder" in said  # the keys are the source tokens, the queries the decoder's
        assert any("animal" in o for o in focus.options)  # the focus is a decoder token
    assert any(m.value.startswith("1. layer ") for m in at.markdown)  # the ranked heads


def test_decoder_self_attention_of_an_encoder_decoder_says_what_to_choose(bart_dir: str) -> None:
    at = run_app(
        src="Hugging Face", model_id=bart_dir, target=TARGET, part="decoder self-attention", view="Two sentences"
    )
    clean(at)
    assert any("encoder self-attention or cross-attention" in i.value for i in at.info)


def test_long_text_matches_words_and_focuses_on_the_first_it(minilm) -> None:
    at = run_app(view="Two sentences", text=LONG)
    clean(at)
    assert (at.text_input(key="two_old").value, at.text_input(key="two_new").value) == ("tired", "wide")
    assert at.button(key="two_swap").label == "Swap tired ↔ wide"
    focus = at.selectbox(key="two_focus").value
    assert focus == "it (10)", focus  # [CLS] the animal didn ' t cross the street because it
    said = " ".join([c.value for c in at.caption] + [i.value for i in at.info]).replace("\\", "")
    assert "1st of 35" in said, said  # which "it" of the long text
    first = next(m.value for m in at.markdown if m.value.startswith("1. "))
    assert "moved +0.000" not in first and "moved -0.000" not in first, first


def test_shared_pairs_keep_a_repeated_text_in_place() -> None:
    from mha_viz.analysis.referents import shared_pairs

    a = ["<s>"] + ["it", "was", "tired", "."] * 3
    b = ["<s>", "it", "was", "wide", "."] + ["it", "was", "tired", "."] * 2
    pairs = shared_pairs(a, b)
    assert pairs == [(i, i) for i in range(len(a)) if i != 3]

"""Two sentences on an encoder-decoder (issue 21 §1.3) and on a long text (§1.4), through AppTest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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
    assert at.radio(key="two_top").options[0].startswith("1\\. layer ")  # the ranked heads (1\\.: not a list)


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
    first = at.radio(key="two_top").options[0]
    assert "moved +0.000" not in first and "moved -0.000" not in first, first


def test_shared_pairs_keep_a_repeated_text_in_place() -> None:
    from mha_viz.analysis.referents import shared_pairs

    a = ["<s>"] + ["it", "was", "tired", "."] * 3
    b = ["<s>", "it", "was", "wide", "."] + ["it", "was", "tired", "."] * 2
    pairs = shared_pairs(a, b)
    assert pairs == [(i, i) for i in range(len(a)) if i != 3]


# --- issue 35 §2.1: say where the weight went, rank by what the title claims ----------------------------------
def test_moves_count_only_weight_that_leaves_referent_1_for_referent_2() -> None:
    from mha_viz.analysis.moves import destinations, rank_switch, switched_weight, switches

    pairs = [(i, i) for i in range(5)]  # [CLS] animal street it [SEP], every key shared
    sinks = np.array([True, False, False, False, True])
    a = np.array([[[0.1, 0.6, 0.1, 0.1, 0.1], [0.1, 0.6, 0.1, 0.1, 0.1], [0.1, 0.5, 0.2, 0.1, 0.1]]])  # [1, 3, 5]
    b = np.array([[[0.45, 0.2, 0.15, 0.1, 0.1], [0.1, 0.1, 0.6, 0.1, 0.1], [0.1, 0.6, 0.1, 0.1, 0.1]]])
    da, db = destinations(a, b, pairs, (1, 2), sinks)
    np.testing.assert_allclose(da.sum(-1), 1.0)
    np.testing.assert_allclose(db[0, 0], [0.2, 0.15, 0.55, 0.1])  # head 0: "animal"'s loss went to a sink
    moved = switched_weight(da, db)
    np.testing.assert_allclose(moved[0], [0.05, 0.5, -0.1])  # street's gain, at most animal's loss
    assert switches(da, db)[0].tolist() == [False, True, False]
    assert [h for _, h, _ in rank_switch(moved, 3)] == [1, 0, 2]


def test_two_sentences_ranks_by_the_switch_and_says_where_the_weight_went(minilm) -> None:
    """Issue 35 §2.1: L3 H1 was ranked first as "moves from animal to street" (+0.453) while "street" gained only
    0.05 → 0.13 and [CLS] took 0.12 → 0.36; no MiniLM head really switches "it" to "street"."""
    import re

    at = run_app(view="Two sentences")
    clean(at)
    first = at.radio(key="two_top").options[0].replace("\\", "")
    nums = re.search(
        r"moved ([+-]\d\.\d+) \(animal (\d\.\d+) → (\d\.\d+), street (\d\.\d+) → (\d\.\d+), sinks (\d\.\d+) → "
        r"(\d\.\d+), the rest (\d\.\d+) → (\d\.\d+)\)",
        first,
    )
    assert nums, first
    moved, a1, b1, a2, b2, sa, sb, ra, rb = (float(x) for x in nums.groups())
    assert moved == pytest.approx(min(b2 - a2, a1 - b1), abs=0.011)  # what the title claims, no more
    assert moved <= b2 - a2 + 0.006
    assert a1 + a2 + sa + ra == pytest.approx(1, abs=0.03) and b1 + b2 + sb + rb == pytest.approx(1, abs=0.03)
    said = " ".join(i.value for i in at.info).replace("\\", "")
    assert "No head really switches “it” from “animal” to “street”" in said, said
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (bars,) = [s for s in specs if "where “it”'s weight goes" in str(s["layout"].get("annotations"))]
    dest = [t for t in bars["data"] if t.get("xaxis", "x") == "x"]  # the chart's first panel
    assert len(dest) == 2 and len(dest[0]["x"]) == 4  # a bar per destination, per sentence
    assert "sinks" in dest[0]["x"][2] and dest[0]["x"][3] == "the rest"


# --- issue 35 §2.5: a long text without "animal": focus and candidates from the text, and why ----------------
def test_candidates_are_the_words_the_pronoun_attends_to_near_it() -> None:
    from mha_viz.analysis.referent_pick import attended_candidates, pronoun_focus

    labels = ["[CLS]", "the (1)", "old", "dog", "ran", ".", "the (6)", "cat", "saw", "the (9)", "mouse", "and",
              "she", "was", "happy", "[SEP]"]  # fmt: skip
    assert pronoun_focus(labels, 14)[0] == 12 and "she" in pronoun_focus(labels, 14)[1]
    assert pronoun_focus(["[CLS]", "a", "b", "[SEP]"], None) is None
    w = np.array([0.5, 0.01, 0.02, 0.3, 0.01, 0.05, 0.01, 0.1, 0.02, 0.01, 0.08, 0.01, 0.01, 0.05, 0.2, 0.3])
    special = [lb in ("[CLS]", "[SEP]") for lb in labels]
    c1, c2, why = attended_candidates(w, labels, 12, special)
    assert (labels[c1], labels[c2]) == ("dog", "cat")  # before "she", function words and [CLS] set aside
    assert "“dog” (0.300)" in why and "“cat” (0.100)" in why


def test_long_text_without_animal_picks_its_own_referents_and_says_why(minilm) -> None:
    from mha_viz.studies.corpus_run import bundled_texts

    head = " ".join(t for t in bundled_texts() if "animal" not in t)[:2400].replace("tired", "sleepy")
    text = head + " The old dog stayed in the house because it was too tired."
    at = run_app(view="Two sentences", text=text)
    clean(at)
    focus, c1, c2 = (at.selectbox(key=k).value for k in ("two_focus", "two_c1", "two_c2"))
    labels = at.selectbox(key="two_c1").options
    assert focus.startswith("it (") and int(focus[4:-1]) > 400, focus  # the "it" of the last sentence
    sentence = labels[labels.index("the (493)") : labels.index(focus)]  # "the old dog stayed in the house because"
    assert c1 in sentence and c2 in sentence and {c1, c2} <= {"old (494)", "dog (495)", "stayed", "house"}, (c1, c2)
    said = " ".join(c.value for c in at.caption).replace("\\", "")
    assert f"Candidates: the two words in its sentence and the one before that “{focus}” attends to most" in said

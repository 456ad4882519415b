"""Finding the "it" → "animal" head and ranking heads by how a word swap moves "it" between its referents:
hand-made patterns with known answers, the real MiniLM patterns, and the app (AppTest) on its default page."""

from __future__ import annotations

from typing import TYPE_CHECKING

import apptest_helpers as app
import numpy as np
import pytest

from conftest import SENTENCE
from mha_viz.analysis.patterns import align_tokens, focus_shift
from mha_viz.analysis.referents import (
    default_pair,
    differing_words,
    focus_head,
    rank_heads,
    referent_shift,
    replace_word,
    shared_weights,
    specific_head,
)
from mha_viz.config import Config
from mha_viz.pipeline.road import encode, traces

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest

WIDE = SENTENCE.replace("tired", "wide")
# Hand-made sentences: a = [CLS] the animal street it tired, b = the same with "wide" (index 5 not shared).
N, IT, ANIMAL, STREET, SWAPPED = 6, 4, 2, 3, 5
PAIRS = [(i, i) for i in range(5)]


def row(**weights: float) -> np.ndarray:
    """A focus row over the 6 hand-made tokens: the named weights, the rest spread evenly; sums to 1."""
    names = {"cls": 0, "the": 1, "animal": ANIMAL, "street": STREET, "it": IT, "swapped": SWAPPED}
    r = np.zeros(N)
    for name, w in weights.items():
        r[names[name]] = w
    rest = [i for i in range(N) if r[i] == 0]
    r[rest] = (1 - r.sum()) / len(rest)
    return r


def patterns(focus_rows: dict[tuple[int, int], np.ndarray], L: int = 2, H: int = 3) -> np.ndarray:
    """[L, H, N, N]: uniform rows, except the focus token's row in the given heads."""
    p = np.full((L, H, N, N), 1 / N)
    for (la, he), r in focus_rows.items():
        p[la, he, IT] = r
    return p


def test_focus_head_finds_the_planted_max_and_breaks_ties_low() -> None:
    p = np.random.default_rng(0).dirichlet(np.ones(7), size=(3, 4, 7)) * 0.5  # every weight < 0.5
    p[2, 1, 3, 5] = 0.9
    assert focus_head(p, 3, 5) == (2, 1, pytest.approx(0.9))
    p[1, 3, 3, 5] = 0.9  # an equal maximum in an earlier layer wins
    assert focus_head(p, 3, 5)[:2] == (1, 3)
    p[1, 0, 3, 5] = 0.9  # and within a layer the lower head
    assert focus_head(p, 3, 5)[:2] == (1, 0)
    with pytest.raises(ValueError):
        focus_head(p, 7, 0)
    p[0, 0, 3, 5] = np.nan
    with pytest.raises(ValueError):
        focus_head(p, 3, 5)


def test_default_pair() -> None:
    labels = ["[CLS]", "the (1)", "animal", "didn", "cross", "the (5)", "street", "because", "it", "was", "[SEP]"]
    assert default_pair(labels) == (8, 2)
    she = ["[CLS]", "she", "gave", "him", "the", "book", "because", "he", "had", "asked", "for", "it", "[SEP]"]
    assert default_pair(she) == (11, 5)  # the last pronoun, the word after the first article before it
    assert default_pair(["[CLS]", "humpty", "dumpty", "sat", "on", "[SEP]"]) is None  # no pronoun
    assert default_pair(["[CLS]", "it", "was", "a", "cat", "[SEP]"]) is None  # no article before the pronoun
    assert default_pair(["<s>", "The", "cat", "saw", "it"]) == (4, 2)  # case-insensitive


def test_a_head_that_moves_weight_from_c1_to_c2_ranks_first() -> None:
    mover_a, mover_b = row(animal=0.6, street=0.1), row(animal=0.2, street=0.5)
    swapped_a, swapped_b = row(swapped=0.9), row(swapped=0.9)  # looks only at tired / wide
    weak_a, weak_b = row(animal=0.3, street=0.2), row(animal=0.25, street=0.25)
    pa = patterns({(1, 2): mover_a, (0, 1): swapped_a, (1, 0): weak_a})
    pb = patterns({(1, 2): mover_b, (0, 1): swapped_b, (1, 0): weak_b})
    r = referent_shift(pa, pb, IT, IT, PAIRS, (ANIMAL, STREET), (ANIMAL, STREET))
    assert r["moved"].shape == (2, 3)
    # By hand: the shared keys hold 1 - w(swapped) of each row; renormalised, mover a = (.6, .1)/m_a ...
    ma, mb = 1 - mover_a[SWAPPED], 1 - mover_b[SWAPPED]
    expected = (0.5 / mb - 0.1 / ma) - (0.2 / mb - 0.6 / ma)
    assert r["moved"][1, 2] == pytest.approx(expected)
    assert r["a1"][1, 2] == pytest.approx(0.6 / ma) and r["b2"][1, 2] == pytest.approx(0.5 / mb)
    assert r["shared_a"][1, 2] == pytest.approx(ma)
    ranked = rank_heads(r["moved"])
    assert ranked[0][:2] == (1, 2) and ranked[0][2] > 0
    assert ranked[1][:2] == (1, 0)
    # The head that only attends to the swapped word: renormalised, its two rows are the same -> moved 0.
    assert r["moved"][0, 1] == pytest.approx(0.0, abs=1e-12)
    assert [h[:2] for h in ranked].index((0, 1)) > 1
    # ... while the old total-variation change calls it the most changed head.
    tv = np.stack([focus_shift(pa[la], pb[la], IT, IT, PAIRS)["change"] for la in range(2)])
    assert np.unravel_index(int(np.argmax(tv)), tv.shape) == (0, 1)
    # Swapping the sentences (or the candidates) flips the sign, not the size.
    back = referent_shift(pb, pa, IT, IT, PAIRS, (ANIMAL, STREET), (ANIMAL, STREET))
    np.testing.assert_allclose(back["moved"], -r["moved"], atol=1e-12)
    flip = referent_shift(pa, pb, IT, IT, PAIRS, (STREET, ANIMAL), (STREET, ANIMAL))
    np.testing.assert_allclose(flip["moved"], -r["moved"], atol=1e-12)


def test_referent_shift_refuses_unshared_candidates_and_never_gives_nan() -> None:
    pa = patterns({})
    with pytest.raises(ValueError):
        referent_shift(pa, pa, IT, IT, PAIRS, (ANIMAL, SWAPPED), (ANIMAL, SWAPPED))
    with pytest.raises(ValueError):
        referent_shift(pa, pa, IT, IT, PAIRS, (ANIMAL, STREET), (STREET, ANIMAL))  # not the same shared token
    out, mass = shared_weights(np.array([[0.0, 0.0, 1.0]]), np.array([0, 1]))
    assert np.all(out == 0) and mass[0] == 0


def test_word_helpers() -> None:
    assert differing_words(SENTENCE, WIDE) == ("tired", "wide")
    assert differing_words(SENTENCE, SENTENCE) is None
    assert differing_words("a b c", "a x y") is None  # two words differ
    assert replace_word(SENTENCE, "tired", "wide") == WIDE
    assert replace_word("the cat and the cat", "cat", "dog") == "the cat and the dog"
    assert replace_word(SENTENCE, "tire", "wide") is None  # whole words only
    assert replace_word(SENTENCE, "tired", "very wide") is None


@pytest.fixture(scope="module")
def minilm_two(minilm):
    """Every layer's pattern of the tired / wide sentences on MiniLM, with their labels."""
    out = []
    for text in (SENTENCE, WIDE):
        _, _, found = traces(Config(), text, lm=minilm)
        out.append((list(found[0].tokens), np.stack([t.pattern.numpy() for t in found])))  # [L, H, n, n]
    return out


def test_minilm_focus_head_is_the_max_of_the_real_patterns(minilm_two) -> None:
    (labels, p), _ = minilm_two
    q, k = default_pair(labels)
    assert (labels[q], labels[k]) == ("it", "animal")
    layer, head, w = focus_head(p, q, k)
    assert w == pytest.approx(float(p[:, :, q, k].max()))
    assert p[layer, head, q, k] == w and w > 0.5  # a head that really links "it" to "animal"


def test_minilm_ranking_follows_the_story(minilm_two) -> None:
    (la, pa), (lb, pb) = minilm_two
    pairs = align_tokens(la, lb)
    r = referent_shift(pa, pb, la.index("it"), lb.index("it"), pairs, (la.index("animal"), la.index("street")),
                       (lb.index("animal"), lb.index("street")))  # fmt: skip
    layer, head, moved = rank_heads(r["moved"], 1)[0]
    assert moved > 0  # tired -> wide: weight moves from "animal" to "street"
    assert r["b1"][layer, head] < r["a1"][layer, head] and r["b2"][layer, head] > r["a2"][layer, head]
    # The same number from the raw patterns, by hand.
    ia, ib = [i for i, _ in pairs], [j for _, j in pairs]
    wa = pa[layer, head, la.index("it"), ia] / pa[layer, head, la.index("it"), ia].sum()
    wb = pb[layer, head, lb.index("it"), ib] / pb[layer, head, lb.index("it"), ib].sum()
    sa, sb = ia.index(la.index("street")), ia.index(la.index("animal"))
    assert moved == pytest.approx((wb[sa] - wa[sa]) - (wb[sb] - wa[sb]), abs=1e-6)


# --- The app (Streamlit AppTest, real MiniLM) ---------------------------------------------------------------


def run_app(**params: str) -> AppTest:
    """The app with these link values (the Heads tab unless a view is given: the Lesson opens first)."""
    return app.run_app(**{"view": "Heads", **params})


clean = app.assert_clean


def titles(at: AppTest) -> list[str]:
    """Every chart's title, and every panel's title of a chart of several (their annotations)."""
    return [t for s in app.specs(at) for t in [s["layout"].get("title", {}).get("text", "")]
            + [a.get("text", "") for a in s["layout"].get("annotations", [])]]  # fmt: skip


def test_app_opens_on_the_found_head(minilm, minilm_two) -> None:
    """The head where "it"'s weight on "animal" stands out most from the other tokens' (not the largest weight:
    MiniLM's layer 5, head 11, where almost every token gives "animal" much weight); the caption says both."""
    (labels, p), _ = minilm_two
    q, k = labels.index("it"), labels.index("animal")
    layer, head, w, others, others_max = specific_head(p, q, k)
    top = focus_head(p, q, k)
    assert top[:2] != (layer, head)  # on this sentence the two rules differ: the test tells them apart
    rest = np.delete(p[top[0], top[1], :, k], q)
    at = run_app()
    clean(at)
    assert at.selectbox(key="layer").value == layer and at.selectbox(key="head").value == head
    assert at.selectbox(key="focus").value == "it"
    said = [c.value.replace("\\", "") for c in at.caption]  # markdown escapes dropped
    assert (
        f"Opened on layer {layer}, head {head}: the head where “it” attends to “animal” ({w:.2f}) most unlike the "
        f"other tokens, which give “animal” {others:.2f} on average there (at most {others_max:.2f}). Layer "
        f"{top[0]}, head {top[1]} gives “animal” more weight from “it” ({top[2]:.2f}), but almost every token does "
        f"there ({rest.min():.2f}–{rest.max():.2f})." in said
    ), said
    assert any(t.startswith(f"Layer {layer}, head {head}: attention weights") for t in titles(at))


def test_app_link_layer_and_head_win(minilm, minilm_two) -> None:
    (labels, p), _ = minilm_two
    layer, head, *_ = specific_head(p, labels.index("it"), labels.index("animal"))
    assert layer != 2  # else the link's layer would be the found one
    at = run_app(layer="2")
    clean(at)
    assert at.selectbox(key="layer").value == 2 and at.selectbox(key="head").value == 0
    said = [c.value.replace("\\", "") for c in at.caption]
    assert any(c.startswith(f"Layer {layer}, head {head} is the head where “it” attends to “animal”") for c in said), (
        said
    )
    at = run_app(layer="1", head="head 4")
    assert at.selectbox(key="layer").value == 1 and at.selectbox(key="head").value == 4
    at = run_app(text="humpty dumpty sat on")  # no pronoun: today's defaults
    clean(at)
    assert at.selectbox(key="layer").value == 0 and at.selectbox(key="head").value == 0


def test_app_two_sentences_ranking(minilm, minilm_two) -> None:
    from mha_viz.analysis.moves import destinations, rank_switch, switched_weight

    (la, pa), (lb, pb) = minilm_two
    pairs = align_tokens(la, lb)
    sinks = np.asarray([la[i] in ("[CLS]", "[SEP]") for i, _ in pairs])
    slots = ([i for i, _ in pairs].index(la.index("animal")), [i for i, _ in pairs].index(la.index("street")))

    def ranking(p1: np.ndarray, p2: np.ndarray) -> list[tuple[int, int, float]]:
        a, b = destinations(p1[:, :, la.index("it")], p2[:, :, lb.index("it")], pairs, slots, sinks)
        return rank_switch(switched_weight(a, b), 3)  # ranked by what moved from "animal" to "street"

    top = ranking(pa, pb)
    at = run_app(view="Two sentences")
    clean(at)
    assert (at.selectbox(key="two_c1").value, at.selectbox(key="two_c2").value) == ("animal", "street")
    first = at.radio(key="two_top").options[0].replace("\\", "")  # the ranked heads: one radio
    assert first.startswith(f"1. layer {top[0][0]}, head {top[0][1]}: moved +{top[0][2]:.3f}")
    assert at.radio(key="two_top").index == 0  # the shown head's row is chosen
    assert any(t.startswith(f"Layer {top[0][0]}, head {top[0][1]}: “it”") for t in titles(at))  # opened on the top
    at.radio(key="two_top").set_value(2).run()  # the third-ranked head opens below
    clean(at)
    assert (at.selectbox(key="two_layer").value, at.selectbox(key="two_head").value) == top[2][:2]
    assert at.radio(key="two_top").index == 2
    assert any(t.startswith(f"Layer {top[2][0]}, head {top[2][1]}: “it”") for t in titles(at))
    at.button(key="two_swap").click().run()  # the sentences change places: the same heads, the opposite sign
    clean(at)
    assert at.sidebar.text_area(key="text").value == WIDE and at.text_input(key="text_b").value == SENTENCE
    first = at.radio(key="two_top").options[0].replace("\\", "")
    back = ranking(pb, pa)  # swapped: what moved from "animal" to "street" going from "wide" to "tired"
    assert first.startswith(f"1. layer {back[0][0]}, head {back[0][1]}: moved {back[0][2]:+.3f}")


def test_app_where_defaults_and_opened_head(minilm, minilm_two) -> None:
    (labels, p), _ = minilm_two
    layer, head, _ = focus_head(p, labels.index("it"), labels.index("animal"))
    at = run_app(view="Where does it look?")
    clean(at)
    assert at.selectbox(key="where_q").value == "it" and at.selectbox(key="where_k").value == "animal"
    assert (at.selectbox(key="where_layer").value, at.selectbox(key="where_head").value) == (layer, head)
    assert any(t.startswith(f"Layer {layer}, head {head}: attention weights") for t in titles(at))
    tokens = list(encode(minilm, SENTENCE)[0].labels)
    assert tokens == labels


def test_default_candidates() -> None:
    from mha_viz.analysis.referents import default_candidates

    assert default_candidates(["[CLS]", "the (1)", "animal", "the (5)", "street", "it"]) == (2, 4)
    assert default_candidates(["<s>", "The", "trophy", "in", "the", "suitcase", "it"]) == (2, 5)
    assert default_candidates(["[CLS]", "a", "cat", "sat", "[SEP]"]) is None


def test_app_where_show_button_and_two_word_replacement(minilm) -> None:
    at = run_app(view="Where does it look?")
    label = at.pills(key="where_top").options[2]  # "3. layer L, head H: w"
    la, he = (int(x) for x in label[3:].split(":")[0].replace("layer ", "").replace(" head ", "").split(","))
    at.pills(key="where_top").set_value(2).run()
    clean(at)
    assert (at.selectbox(key="where_layer").value, at.selectbox(key="where_head").value) == (la, he)
    assert any(t.startswith(f"Layer {la}, head {he}: attention weights") for t in titles(at))
    at = run_app(view="Two sentences")
    assert (at.text_input(key="two_old").value, at.text_input(key="two_new").value) == ("tired", "wide")
    at.text_input(key="two_new").set_value("narrow").run()
    at.button(key="two_build").click().run()
    clean(at)
    assert at.text_input(key="text_b").value == SENTENCE.replace("tired", "narrow")
    at.text_input(key="two_old").set_value("zebra").run()
    at.button(key="two_build").click().run()
    assert not at.exception and any("zebra" in w.value for w in at.warning)
    assert at.text_input(key="text_b").value == SENTENCE.replace("tired", "narrow")  # unchanged


CLICKABLE_MAPS = [
    ("where", "where_map", ("where_layer", "where_head")),
    ("two_sentences", "two_moved", ("two_layer", "two_head")),
]


@pytest.mark.parametrize(("module", "chart", "keys"), CLICKABLE_MAPS)
def test_map_click_opens_the_head_in_place(module: str, chart: str, keys: tuple[str, str], monkeypatch) -> None:
    """A click on a layer × head map (customdata layer, head, value) shows that head in the same tab."""
    import importlib
    from types import SimpleNamespace

    import mha_viz.ui.choices as choices
    import mha_viz.ui.opened as opened

    view = importlib.import_module(f"mha_viz.ui.views.{module}")
    points = [{"customdata": {"0": 4, "1": 7, "2": 0.5}}]
    state = {chart: SimpleNamespace(selection=SimpleNamespace(points=points))}
    link: dict = {}
    fake = SimpleNamespace(session_state=state, query_params=link)
    monkeypatch.setattr(choices, "st", fake)
    monkeypatch.setattr(opened, "st", fake)
    monkeypatch.setattr(view, "st", fake)
    view._on_map_click()
    assert (state[keys[0]], state[keys[1]]) == (4, 7) and "view" not in state
    assert keys[0] in link and keys[1] in link  # the link follows the click


def test_specific_head_prefers_the_head_where_the_query_differs_from_the_rest() -> None:
    """Head (0, 1) gives key 0 the most weight from query 2 (0.9) but every row gives it 0.8–0.9 (a sink); head
    (1, 0) gives it 0.6 from query 2 and 0.1 from the others: that one says something about query 2."""
    n = 4
    p = np.full((2, 2, n, n), 1.0 / n)  # [L, H, n, n]: uniform rows
    p[0, 1, :, 0] = [0.8, 0.85, 0.9, 0.8]
    p[1, 0, :, 0] = [0.1, 0.1, 0.6, 0.1]
    p[..., 1:] = ((1 - p[..., :1]) / (n - 1)).repeat(n - 1, axis=-1)  # rows sum to 1
    assert focus_head(p, 2, 0)[:2] == (0, 1)
    layer, head, weight, others, others_max = specific_head(p, 2, 0)
    assert (layer, head) == (1, 0)
    assert weight == pytest.approx(0.6) and others == pytest.approx(0.1) and others_max == pytest.approx(0.1)


def test_specific_head_leaves_out_rows_that_cannot_see_the_key() -> None:
    """Causal: rows before the key give it 0 in every head; they are not "the other tokens"."""
    p = np.zeros((1, 2, 3, 3))  # [L, H, n, n]
    p[0, :, 0, 0] = 1.0
    p[0, 0, 1] = [0.5, 0.5, 0.0]
    p[0, 1, 1] = [0.2, 0.8, 0.0]
    p[0, 0, 2] = [0.2, 0.6, 0.2]
    p[0, 1, 2] = [0.1, 0.8, 0.1]
    layer, head, weight, others, _ = specific_head(p, 2, 1)  # key 1: row 0 cannot see it
    assert (layer, head) == (0, 0) and weight == pytest.approx(0.6) and others == pytest.approx(0.5)


def test_default_pair_of_a_long_text_looks_near_its_pronoun() -> None:
    """Issue 35 §2.5: a long text without "animal" opened on "it (502)" → "old", the word after the text's first
    article, hundreds of tokens away; the key now comes from the pronoun's sentence or the one before it."""
    filler = ["[CLS]", "the", "old", "man", "sang", "."] + ["we", "walked", "on", "the", "river", "."] * 80
    tail = ["the", "dog", "stayed", "in", "a", "house", "because", "it", "was", "tired", ".", "[SEP]"]
    labels = filler + tail
    q, k = default_pair(labels)
    assert labels[q] == "it" and q == len(filler) + 7
    assert k == len(filler) + 1 and labels[k] == "dog"  # the first article of its own sentence: not "old", "river"
    assert labels[default_pair([*filler, "because", "it", "ran"])[1]] == "river"  # else the sentence before it
    own_words = ["The", "old", "man", "sang."] + ["We", "walked."] * 100 + ["A", "dog", "barked", "because", "it"]
    assert own_words[default_pair(own_words)[1]] == "dog"  # word tokens keep their full stop

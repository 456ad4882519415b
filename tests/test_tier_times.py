"""The tiers' times printed at the end of a run (tests/tier_times.py, hooked in by tests/conftest.py)."""

from __future__ import annotations

from tier_times import TierTimes


def test_phases_add_up_per_tier_and_each_test_counts_once() -> None:
    times = TierTimes()
    for seconds in (2.0, 3.5, 0.5):  # set-up, call, tear-down
        times.add("tests/test_a.py::test_x", {"test_x": 1, "app": 1, "tests": 1}, seconds)
    times.add("tests/test_a.py::test_y", ["test_y", "unit"], 0.25)
    times.add("tests/e2e/test_b.py::test_z", ["e2e", "test_z"], 10.0)
    assert times.lines() == [
        " unit:     1 tests      0.2 s",
        "  app:     1 tests      6.0 s",
        "  e2e:     1 tests     10.0 s",
        "  all:     3 tests     16.2 s (summed over workers, not wall time)",
    ]


def test_a_test_with_no_tier_is_shown_not_dropped() -> None:
    times = TierTimes()
    times.add("tests/test_c.py::test_w", ["test_w"], 1.0)
    assert times.lines()[0] == "untiered:     1 tests      1.0 s"

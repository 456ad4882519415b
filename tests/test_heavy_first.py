"""tests/heavy_first.py: the files go to the xdist workers heaviest first, each pass by its own figures, a file's
tests in their order; an unlisted file by its test count."""

from __future__ import annotations

from heavy_first import E2E_S, PASS1_S, UNLISTED_S, heaviest_first


def _order(items: list[tuple[str, str, bool]]) -> list[str]:
    got = heaviest_first(items, lambda it: it[0], lambda it: it[2])
    return [name for _, name, _ in got]


def test_heaviest_file_first_each_pass_by_its_own_figures() -> None:
    light, heavy = "tests/test_light_unlisted.py", "tests/test_coverage.py"
    assert PASS1_S[heavy] > 3 * UNLISTED_S and "tests/test_budget_views.py" in E2E_S
    items = [(light, "l1", False), (light, "l2", False), (light, "l3", False), (heavy, "h1", False),
             (heavy, "h2", False),
             ("tests/test_budget_views.py", "b-e2e", True), ("tests/test_budget_views.py", "b1", False),
             ("tests/test_unlisted_e2e.py", "u-e2e", True)]  # fmt: skip
    # by seconds: budget_views' e2e part (88), coverage (65, its tests in their order), budget_views' other part
    # (35), then the unlisted by test count (3 × 0.5 before 1 × 0.5)
    assert _order(items) == ["b-e2e", "h1", "h2", "b1", "l1", "l2", "l3", "u-e2e"]


def test_unlisted_files_by_their_test_count_and_equal_ones_as_collected() -> None:
    items = [("tests/a.py", "a1", False), ("tests/b.py", "b1", False), ("tests/b.py", "b2", False),
             ("tests/c.py", "c1", False)]  # fmt: skip
    assert _order(items) == ["b1", "b2", "a1", "c1"]

"""The one registry of views (mha_viz/ui/registry.py, issue 22 §1): every view module is in it, every entry's
function exists, the navigation comes from it, and a view whose needs are not met says why without running."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from apptest_helpers import OWN, assert_clean, run_app

import mha_viz.ui as ui
from mha_viz.ui import registry
from mha_viz.ui.sidebar import GROUP_OF, VIEW_GROUPS, VIEWS

VIEWS_DIR = Path(registry.__file__).parent / "views"


def _view_functions() -> set[tuple[str, str]]:
    """(module, function) of every top-level *_view function in mha_viz/ui/views/."""
    found = set()
    for path in VIEWS_DIR.glob("*.py"):
        if path.name == "__init__.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_view"):
                found.add((path.stem, node.name))
    return found


def test_every_view_module_is_registered_and_every_entry_runs_something() -> None:
    assert {(v.module, v.function) for v in registry.REGISTRY} == _view_functions()
    names = [v.name for v in registry.REGISTRY]
    assert len(names) == len(set(names))
    for v in registry.REGISTRY:
        assert callable(v.run()) and v.group in registry.GROUPS and v.needs <= set(registry.NEEDS), v


def test_the_navigation_comes_from_the_registry() -> None:
    assert tuple(v.name for g in registry.GROUPS for v in registry.REGISTRY if v.group == g) == VIEWS
    assert list(VIEW_GROUPS) == list(registry.GROUPS) and all(VIEW_GROUPS.values())
    assert {v.name: v.group for v in registry.REGISTRY} == GROUP_OF
    assert set(ui.VIEW_FUNCS) == set(VIEWS)


@pytest.mark.parametrize("view", [v.name for v in registry.REGISTRY if "pretrained" in v.needs])
def test_a_view_that_needs_a_pretrained_model_says_so_without_running(view: str, monkeypatch) -> None:
    ran: list[str] = []
    monkeypatch.setitem(ui.VIEW_FUNCS, view, lambda ctx: ran.append(view))
    at = run_app(view=view, **OWN)
    assert_clean(at)
    assert ran == []
    why = registry.BY_NAME[view].own  # what the view does that own weights cannot give (issue 35 §2.3)
    assert why and any(i.value.startswith(f"{view} {why}.") for i in at.info), [i.value for i in at.info]
    assert not any("looks across the layers" in i.value for i in at.info)

"""The house keeps its shape (issue 22 §1), read from the code's imports (AST), not policed by hand:
only models/ imports transformers, only figures/ imports plotly, only ui/ and the server's start imports
streamlit; nothing imports the command line; the model layer and the figures never reach up; no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mha_viz"
SERVE = ("mha_viz.server_start", "mha_viz.server_limits")  # the Streamlit server's own start and limits


def _module(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Modules ``path`` imports (``from a import b``: a and a.b), leaving out `if TYPE_CHECKING:` blocks; with
    ``top_level_only`` also the imports inside functions (they run later, so they cannot make a cycle)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                continue
            if top_level_only and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.add(child.module)
                found.update(f"{child.module}.{a.name}" for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


MODULES = {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _users(library: str) -> set[str]:
    return {m for m, p in MODULES.items() if any(i == library or i.startswith(library + ".") for i in imports(p))}


@pytest.mark.parametrize(
    ("library", "allowed"),
    [("transformers", ("mha_viz.models",)), ("plotly", ("mha_viz.figures",)), ("streamlit", ("mha_viz.ui", *SERVE))],
)
def test_each_library_has_one_home(library: str, allowed: tuple[str, ...]) -> None:
    outside = {m for m in _users(library) if not m.startswith(allowed)}
    assert not outside, f"{library} imported outside {allowed}: {sorted(outside)}"


def test_nothing_imports_the_command_line() -> None:
    cli = {m for m in MODULES if m == "mha_viz.__main__" or m.endswith("_cli") or m == "mha_viz.cli_options"}
    users = {m: {i for i in imports(p) if i in cli or i.rsplit(".", 1)[0] in cli} for m, p in MODULES.items()}
    wrong = {m: sorted(found) for m, found in users.items() if found and m != "mha_viz.__main__" and m not in cli}
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("layer", "never"),
    [
        ("mha_viz.models", ("mha_viz.ui", "mha_viz.figures", "mha_viz.pipeline", "mha_viz.studies", "mha_viz.show")),
        ("mha_viz.figures", ("mha_viz.ui", "mha_viz.models", "mha_viz.pipeline", "mha_viz.show")),
    ],
)
def test_lower_layers_never_reach_up(layer: str, never: tuple[str, ...]) -> None:
    up = {m: sorted(i for i in imports(p) if i.startswith(never)) for m, p in MODULES.items() if m.startswith(layer)}
    assert not {m: found for m, found in up.items() if found}


def test_no_import_cycle() -> None:
    graph = {m: {i for i in imports(p, top_level_only=True) if i in MODULES and i != m} for m, p in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def walk(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*path, m, n]
            if n not in state and (cycle := walk(n, [*path, m])):
                return cycle
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = walk(m, [])
            assert cycle is None, " -> ".join(cycle)

"""The house keeps its shape (issue 22 §1), read from the code's imports (AST), not policed by hand: only
models/ imports transformers, only figures/ imports plotly, only ui/ and serve/ import streamlit; each layer
imports only the layers below it (cli, serve, show → ui → studies → pipeline → models → engine, with analysis/
and figures/ beside the road and runtime/ under everything); nothing imports cli/ or serve/; no import cycle."""

from __future__ import annotations

import ast
import functools
import operator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mha_viz"
SERVE = ("mha_viz.serve",)  # the Streamlit server's own script, start and limits


def _module(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


@functools.cache
def _tree(source: str) -> ast.Module:
    """One parse per source text, shared by every rule below (each reads the whole package: ~1 s a test unshared).
    Keyed by the text, so a file written again (the rule tests' own files) is parsed again; never mutated."""
    return ast.parse(source)


def parse(path: Path) -> ast.Module:
    return _tree(path.read_text(encoding="utf-8"))


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Modules ``path`` imports (``from a import b``: a and a.b), leaving out `if TYPE_CHECKING:` blocks; with
    ``top_level_only`` also the imports inside functions (they run later, so they cannot make a cycle)."""
    return set(_imports(path.read_text(encoding="utf-8"), top_level_only))


@functools.cache
def _imports(source: str, top_level_only: bool) -> frozenset[str]:
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

    visit(_tree(source))
    return frozenset(found)


MODULES = {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}
ENGINE = {"trace", "config", "selection", "errors", "attention", "edits", "own", "own_variants", "pooling", "tiles",
          "tile_pool"}  # fmt: skip
BELOW = {  # what each layer may import from the package, besides itself
    "engine": {"engine"},
    "runtime": {"engine"},
    "models": {"engine", "runtime"},
    "analysis": {"engine"},
    "figures": {"engine", "analysis"},
    "pipeline": {"engine", "runtime", "models", "analysis"},
    "studies": {"engine", "runtime", "models", "analysis", "pipeline"},
    "ui": {"engine", "runtime", "models", "analysis", "pipeline", "studies", "figures"},
    "show": {"engine", "runtime", "models", "analysis", "pipeline", "studies", "figures"},
    "serve": {"engine", "runtime", "ui", "figures"},  # figures: the stored first page, drawn without ui's torch
    "cli": {"engine", "runtime", "models", "analysis", "pipeline", "studies", "figures", "show"},
    "__main__": {"cli"},
}


def layer_of(module: str) -> str:
    top = module.split(".")[1] if "." in module else ""
    return "engine" if top in ENGINE else top


def _users(library: str) -> set[str]:
    return {m for m, p in MODULES.items() if any(i == library or i.startswith(library + ".") for i in imports(p))}


@pytest.mark.parametrize(
    ("library", "allowed"),
    [("transformers", ("mha_viz.models",)), ("plotly", ("mha_viz.figures",)), ("streamlit", ("mha_viz.ui", *SERVE))],
)
def test_each_library_has_one_home(library: str, allowed: tuple[str, ...]) -> None:
    outside = {m for m in _users(library) if not m.startswith(allowed)}
    assert not outside, f"{library} imported outside {allowed}: {sorted(outside)}"


def test_every_module_sits_in_a_known_layer() -> None:
    assert {layer_of(m) for m in MODULES if m != "mha_viz"} <= set(BELOW), "a new top-level module or folder"


def test_imports_run_downward_only() -> None:
    wrong = {}
    for m, p in MODULES.items():
        if m == "mha_viz":
            continue
        mine = layer_of(m)
        inside = (i for i in imports(p) if i in MODULES and i != "mha_viz")
        up = sorted(i for i in inside if layer_of(i) not in BELOW[mine] | {mine})
        if up:
            wrong[m] = up
    assert not wrong, wrong


def test_nothing_imports_the_command_line_or_the_server() -> None:
    users = {
        m: sorted(i for i in imports(p) if i.startswith(("mha_viz.cli", "mha_viz.serve")))
        for m, p in MODULES.items()
        if layer_of(m) not in {"cli", "serve", "__main__"}
    }
    assert not {m: found for m, found in users.items() if found}


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


ABOVE_THE_DOOR = ("mha_viz.studies", "mha_viz.ui", "mha_viz.cli", "mha_viz.show")
MODELS_ABOVE_THE_DOOR: dict[str, set[str] | None] = {  # module -> the names those layers may take from it (None: any)
    "mha_viz.models.catalog": None,  # the catalog: which architectures this install traces
    "mha_viz.models.sources": None,  # the catalog's sources: which models may be loaded, the bundled ones
    "mha_viz.models.offline": None,  # the catalog's local part: which models are on this machine
    "mha_viz.models.placement": None,  # where a model's weights are placed (the --device-map / sidebar syntax)
    "mha_viz.models.load": {"LoadedModel"},  # the loaded model's type only (loading goes through pipeline/)
    "mha_viz.models.tokens": None,  # the Tokens a text becomes and its labels (pure: no model, no torch)
    "mha_viz.models.interventions": None,  # the typed interventions pipeline.run takes
}


def models_imports(path: Path) -> set[tuple[str, str]]:
    """(module, name) for every import of mha_viz.models in ``path``, inside functions too (the CLI imports lazily),
    leaving out `if TYPE_CHECKING:` blocks; ``import mha_viz.models.x`` gives (mha_viz.models.x, "*")."""
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                continue
            if isinstance(child, ast.Import):
                found.update((a.name, "*") for a in child.names if a.name.startswith("mha_viz.models"))
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                if child.module == "mha_viz":
                    found.update((f"mha_viz.{a.name}", "*") for a in child.names if a.name == "models")
                elif child.module.startswith("mha_viz.models"):
                    found.update((child.module, a.name) for a in child.names)
            visit(child)

    visit(parse(path))
    return found


def models_misuse(modules: dict[str, Path]) -> dict[str, list[str]]:
    """What studies/, ui/, cli/ and show import from models/ beyond MODELS_ABOVE_THE_DOOR, per module."""
    wrong = {}
    for m, p in modules.items():
        if not m.startswith(ABOVE_THE_DOOR):
            continue
        bad = []
        for module, name in models_imports(p):
            allowed = MODELS_ABOVE_THE_DOOR.get(module, set())
            if allowed is not None and name not in allowed:
                bad.append(f"{module}.{name}" if name != "*" else module)
        if bad:
            wrong[m] = sorted(bad)
    return wrong


def test_studies_and_views_reach_models_only_through_the_door() -> None:
    """Issue 36 §1: studies/, ui/, cli/ and show run a model only through pipeline (pipeline.run with typed
    interventions; pipeline/weights.py for its weights): from models/ they take only the catalog, placement, the
    LoadedModel type, Tokens and the intervention classes (MODELS_ABOVE_THE_DOOR)."""
    assert not models_misuse(MODULES)


def test_the_door_rule_catches_a_study_calling_run_model(tmp_path: Path) -> None:
    """The rule above fails for a study that imports run_model (or all of models/, or a model's weights) directly."""
    study = tmp_path / "study.py"
    for line, caught in [
        ("from mha_viz.models.run import run_model", "mha_viz.models.run.run_model"),
        ("from mha_viz.models.load import load_model", "mha_viz.models.load.load_model"),
        ("import mha_viz.models.capture", "mha_viz.models.capture"),
        ("from mha_viz import models", "mha_viz.models"),
        ("def f():\n    from mha_viz.models.arch import plain_weights", "mha_viz.models.arch.plain_weights"),
    ]:
        study.write_text(f"{line}\nfrom mha_viz.models.load import LoadedModel\nfrom mha_viz.pipeline import run\n")
        assert models_misuse({"mha_viz.studies.study": study}) == {"mha_viz.studies.study": [caught]}
        assert models_misuse({"mha_viz.pipeline.study": study}) == {}  # pipeline/ is the door: it may
    study.write_text("from mha_viz.models.interventions import Ablate\nfrom mha_viz.models.tokens import Tokens\n")
    assert models_misuse({"mha_viz.ui.view": study, "mha_viz.show": study}) == {}


def _constants(path: Path) -> dict[str, ast.expr]:
    """A module's own ALL_CAPS names bound at its top level (``A = 1``, ``A, B = 1, 2``), with their values."""
    found: dict[str, ast.expr] = {}
    for node in parse(path).body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                pairs = (
                    zip(target.elts, node.value.elts, strict=False)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(target, node.value)]
                )
                for name, value in pairs:
                    if isinstance(name, ast.Name) and name.id.isupper() and not name.id.startswith("_"):
                        found[name.id] = value
    return found


def _is_limit(name: str) -> bool:
    return name.startswith(("MAX_", "MIN_")) or name.endswith(("_MAX", "_MIN", "_TOL", "TOLERANCE"))


def test_limits_and_tolerances_live_in_config() -> None:
    """Every limit (MAX_…, MIN_…) and tolerance (…_TOL) is defined once, in config.py, whoever checks it (the UI, the
    CLI, the road, a study). figures/ keeps its drawing caps (how much of a matrix is drawn cell by cell): they
    are how a figure looks, not what a request may ask."""
    elsewhere = {
        m: sorted(n for n in _constants(p) if _is_limit(n))
        for m, p in MODULES.items()
        if m != "mha_viz.config" and layer_of(m) != "figures"
    }
    assert not {m: names for m, names in elsewhere.items() if names}
    in_config = set(_constants(MODULES["mha_viz.config"]))
    assert {"MATCH_TOL", "MAX_HEADS", "MAX_INDUCTION_LENGTH", "MAX_UPLOAD_BYTES", "WINDOW_ROWS"} <= in_config


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Pow: operator.pow,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
}


def _number(value: ast.expr) -> float | None:
    """The value of a constant written as numbers and arithmetic (``128``, ``16 * 2**20``, ``-1``), else None."""
    if isinstance(value, ast.Constant):
        ok = isinstance(value.value, int | float) and not isinstance(value.value, bool)
        return value.value if ok else None
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        inner = _number(value.operand)
        return None if inner is None else -inner
    if isinstance(value, ast.BinOp) and type(value.op) in _OPS:
        left, right = _number(value.left), _number(value.right)
        return None if left is None or right is None else _OPS[type(value.op)](left, right)
    return None


def test_no_number_is_named_twice() -> None:
    """The same name bound to the same number in two modules is one setting written twice (WINDOW_ROWS = 128 was
    in five views, MATCH_TOL in the road and the unembedding): it belongs in one place, imported by both."""
    seen: dict[tuple[str, float], list[str]] = {}
    for m, p in MODULES.items():
        for name, value in _constants(p).items():
            if (number := _number(value)) is not None:
                seen.setdefault((name, number), []).append(m)
    assert not {k: ms for k, ms in seen.items() if len(ms) > 1}


VIEWS = "mha_viz.ui.views."
VIEW_LINES = 60  # a view function longer than this both chooses and draws: its choices belong in analysis/plans/
LONG_VIEW_FUNCTIONS: dict[str, str] = {}  # "module:function" → why it may stay longer (none today)


def _view_modules() -> dict[str, Path]:
    return {m: p for m, p in MODULES.items() if m.startswith(VIEWS)}


def test_no_view_imports_another_view() -> None:
    """A view module imports no other view module (issue 36 §2): what two views share lives in a non-view ui module
    (ui/claims.py, ui/variant_section.py, ui/two_head.py) or in analysis/; only the package's __init__ lists them."""
    wrong = {
        m: sorted(i for i in imports(p) if i.startswith(VIEWS) and i in MODULES and i != m)
        for m, p in _view_modules().items()
        if m != VIEWS.rstrip(".")
    }
    assert not {m: found for m, found in wrong.items() if found}


def test_view_functions_are_short() -> None:
    """No function of a view module is longer than VIEW_LINES lines (issue 36 §2: the view draws a plan that a pure
    function in analysis/ chose), but those LONG_VIEW_FUNCTIONS names with its reason."""
    long = {}
    for m, p in _view_modules().items():
        for node in ast.walk(parse(p)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{m.removeprefix(VIEWS)}:{node.name}"
                size = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if size > VIEW_LINES and name not in LONG_VIEW_FUNCTIONS:
                    long[name] = size
    assert not long, f"view functions over {VIEW_LINES} lines (move their choices into a plan): {long}"

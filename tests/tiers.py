"""The test tiers (issue 36 §4), set on every collected test by one rule; tests/conftest.py applies it.

- ``e2e``: the program in processes of its own: under tests/e2e (a real server and Chromium), or the test, one of
  its fixtures or a test helper they call (stream_client.serve, ...) starts one (``subprocess``, ``multiprocessing``,
  ``ray``, a Jupyter kernel): a real server, the CLI's process, a notebook kernel, the set-up script.
- ``app``: Streamlit's AppTest: its module imports ``streamlit.testing`` at the top, or the test, one of its
  fixtures or a test helper they call (test_app.run_app, ...; followed through tests/) refers to it.
- ``model``: a real transformers model: its module imports ``transformers`` or tests/zoo.py at the top, or the same
  walk meets them or ``mha_viz.models.load`` (the ``minilm``/``smollm2``/``llama_dir`` fixtures load through them).
- ``slow``: only by hand, for the heaviest model tests (every architecture of the coverage file); ``--fast`` skips them.
- ``unit``: everything else.

A tier marker written in the test module (``pytestmark``) or on the test wins over the rule.
``bash scripts/test.sh --fast`` runs ``-m "unit or model"``.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from pathlib import Path
from typing import Any

TIERS = ("unit", "model", "app", "e2e", "slow")
TESTS_DIR = Path(__file__).resolve().parent
APP_MODULES = ("streamlit.testing",)
MODEL_MODULES = ("transformers", "zoo", "mha_viz.models.load")
MODEL_IMPORTS = ("transformers", "zoo")
PROCESSES = (
    "subprocess",
    "multiprocessing",
    "ray",
    "nbclient",
    "jupyter_client",
)  # a notebook kernel is a process  # a test module importing these at its top is model throughout


def _matches(name: str | None, prefixes: tuple[str, ...]) -> bool:
    return bool(name) and any(name == p or name.startswith(p + ".") for p in prefixes)


def _in_tests(module_name: str | None) -> types.ModuleType | None:
    """The module of that name when it is one of ours under tests/ (a test module, conftest, a helper)."""
    module = sys.modules.get(module_name or "")
    file = getattr(module, "__file__", None)
    if file and _under_tests(file):
        return module
    return None


@functools.cache
def _under_tests(file: str) -> bool:
    """Whether a module file lies under tests/ (asked ~10^5 times a collection: the path is resolved once)."""
    return Path(file).resolve().is_relative_to(TESTS_DIR)


def _codes(code: types.CodeType) -> list[types.CodeType]:
    """A code object and every code nested in it (inner functions, lambdas, comprehensions)."""
    out = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += _codes(const)
    return out


_KNOWN: dict[tuple[str, int, tuple[str, ...]], tuple[Any, bool]] = {}  # a whole walk's answer, with its object


def _known(kind: str, obj: Any, prefixes: tuple[str, ...], walk: Any) -> bool:
    """``walk()``'s answer for ``obj``, walked once per collection (a fixture, a parametrized test or a module is
    asked for each of its tests: ~70 % of the tier rule's time); the object is kept, so its id is not reused."""
    known = _KNOWN.get((kind, id(obj), prefixes))
    if known is None or known[0] is not obj:
        known = _KNOWN[(kind, id(obj), prefixes)] = (obj, walk())
    return known[1]


def refers_to(obj: Any, prefixes: tuple[str, ...], seen: set[int] | None = None) -> bool:
    """Whether a function (or a test module's own helper it calls, transitively) imports or uses a module named
    by ``prefixes``: a local ``import``, a global module or a global object defined in such a module."""
    if seen is None:  # a whole walk: its answer depends only on the object and the prefixes
        return _known("refers", obj, prefixes, lambda: refers_to(obj, prefixes, set()))
    try:  # a method's function; a decorated helper's own code (contextlib.contextmanager, functools.wraps)
        func = inspect.unwrap(getattr(obj, "__func__", obj))
    except ValueError:
        return False
    code = getattr(func, "__code__", None)
    if code is None or id(func) in seen:
        return False
    seen.add(id(func))
    names = {n for c in _codes(code) for n in c.co_names}
    # its module's globals, then what it imports inside itself from our modules (`from test_app import run_app`)
    envs = [getattr(func, "__globals__", {})] + [vars(m) for n in names if (m := _in_tests(n)) is not None]
    for name in names:
        if _matches(name, prefixes):  # `import transformers`, `from streamlit.testing.v1 import AppTest` inside
            return True
        value = next((env[name] for env in envs if name in env), None)
        if value is None:
            continue
        if isinstance(value, types.ModuleType):
            if _matches(value.__name__, prefixes) or (_in_tests(value.__name__) and module_refers_to(value, prefixes)):
                return True
            if _in_tests(value.__name__):  # `import apptest_helpers as app` … `app.run_app()`: the helpers it names
                attrs = [getattr(value, n) for n in names if callable(getattr(value, n, None))]
                if any(refers_to(a, prefixes, seen) for a in attrs):
                    return True
            continue
        owner = getattr(value, "__module__", None)
        if isinstance(owner, str) and _matches(owner, prefixes):
            return True
        if isinstance(owner, str) and _in_tests(owner) and refers_to(value, prefixes, seen):
            return True
    return False


def module_refers_to(module: types.ModuleType, prefixes: tuple[str, ...]) -> bool:
    """Whether a module itself imports such a module (or an object from one) at its top level."""
    return _known("module", module, prefixes, lambda: _module_refers_to(module, prefixes))


def _module_refers_to(module: types.ModuleType, prefixes: tuple[str, ...]) -> bool:
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and _matches(name, prefixes):
            return True
    return False


def tier_of(path: Path, module: types.ModuleType | None, test: Any, fixtures: list[Any]) -> str:
    """The tier of one test: its file's ``path``, its ``module``, the ``test`` function and its fixture functions
    (only those defined under tests/ are read)."""
    ours = [f for f in fixtures if _in_tests(getattr(getattr(f, "__func__", f), "__module__", None))]
    if TESTS_DIR / "e2e" in Path(path).resolve().parents or any(refers_to(f, PROCESSES) for f in [test, *ours]):
        return "e2e"
    for tier, prefixes, top in (("app", APP_MODULES, APP_MODULES), ("model", MODEL_MODULES, MODEL_IMPORTS)):
        if module is not None and module_refers_to(module, top):
            return tier
        if any(refers_to(f, prefixes) for f in [test, *ours]):
            return tier
    return "unit"


def explicit_tier(markers: list[str]) -> str | None:
    """The tier a test was given by hand (``pytestmark`` or a decorator), if any; two are an error."""
    given = sorted({m for m in markers if m in TIERS})
    if len(given) > 1:
        raise ValueError(f"a test has several tiers: {', '.join(given)}")
    return given[0] if given else None


def fixture_functions(item: Any) -> list[Any]:
    """The functions of the fixtures a collected test uses (the closest definition of each name)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", {}) if info is not None else {}
    return [d[-1].func for name in getattr(item, "fixturenames", ()) if (d := defs.get(name))]

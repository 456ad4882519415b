"""The rule that puts every test in a tier (tests/tiers.py, applied by tests/conftest.py; issue 36 §4)."""

from __future__ import annotations

import sys
import textwrap
import types
from pathlib import Path

import pytest
from tiers import TESTS_DIR, TIERS, explicit_tier, tier_of

import conftest


def _module(monkeypatch: pytest.MonkeyPatch, name: str, source: str, where: Path = TESTS_DIR) -> types.ModuleType:
    """A real module of ``source`` whose file lies in ``where``, importable by ``name`` while the test runs."""
    module = types.ModuleType(name)
    module.__file__ = str(where / f"{name}.py")
    monkeypatch.setitem(sys.modules, name, module)
    exec(compile(textwrap.dedent(source), module.__file__, "exec"), vars(module))
    return module


HELPERS = """
from streamlit.testing.v1 import AppTest

def run_app(script):
    return AppTest.from_string(script)

def run_twice(script):
    return run_app(script), run_app(script)

def heatmaps(figure):
    return [figure]
"""

USES_HELPERS = """
from tiers_demo_helpers import heatmaps, run_twice

def test_drives_the_app_through_two_helpers():
    run_twice("import streamlit")

def test_only_reads_figures():
    assert heatmaps(1)
"""


def _tier(module: types.ModuleType, test: str, fixtures: list | None = None, path: Path | None = None) -> str:
    return tier_of(path or Path(module.__file__), module, getattr(module, test), fixtures or [])


def test_a_test_helper_that_drives_apptest_makes_its_callers_app_and_only_them(monkeypatch) -> None:
    _module(monkeypatch, "tiers_demo_helpers", HELPERS)
    tests = _module(monkeypatch, "test_tiers_demo", USES_HELPERS)
    assert _tier(tests, "test_drives_the_app_through_two_helpers") == "app"
    assert _tier(tests, "test_only_reads_figures") == "unit"


def test_apptest_imported_at_the_top_or_inside_a_test_is_app(monkeypatch) -> None:
    top = _module(monkeypatch, "test_tiers_top", "from streamlit.testing.v1 import AppTest\ndef test_x():\n  pass\n")
    inside = _module(
        monkeypatch, "test_tiers_inside", "def test_x():\n  from streamlit.testing.v1 import AppTest\n  AppTest\n"
    )
    assert _tier(top, "test_x") == "app"
    assert _tier(inside, "test_x") == "app"


def test_a_model_fixture_or_a_model_helper_makes_a_model_test(monkeypatch) -> None:
    tests = _module(
        monkeypatch,
        "test_tiers_models",
        """
        from conftest import tiny_causal_lm
        from mha_viz.models.load import load_model

        def test_fixture(minilm):
            assert minilm

        def test_conftest_helper(tmp_path_factory):
            tiny_causal_lm(tmp_path_factory, "llama", {})

        def test_loads_itself():
            load_model("smollm2")

        def test_local_import():
            import transformers
            transformers.AutoConfig
        """,
    )
    assert _tier(tests, "test_fixture", [conftest.minilm.__wrapped__]) == "model"
    assert _tier(tests, "test_fixture") == "unit"  # the fixture is what loads the model
    for test in ("test_conftest_helper", "test_loads_itself", "test_local_import"):
        assert _tier(tests, test) == "model", test


def test_zoo_or_transformers_at_the_top_makes_every_test_of_the_module_model(monkeypatch) -> None:
    for name, top in (("test_tiers_zoo", "from zoo import build"), ("test_tiers_tf", "import transformers")):
        tests = _module(monkeypatch, name, f"{top}\ndef test_pure():\n  assert 1 + 1 == 2\n")
        assert _tier(tests, "test_pure") == "model", name


def test_names_that_only_look_like_models_are_unit(monkeypatch) -> None:
    tests = _module(
        monkeypatch,
        "test_tiers_lookalike",
        """
        import torch

        def test_fake_hub():
            def from_pretrained(src):
                return src
            load_model = from_pretrained
            assert load_model("x") == "x"
            torch.zeros(2).build = None
        """,
    )
    assert _tier(tests, "test_fake_hub") == "unit"


def test_helpers_outside_tests_are_not_followed(monkeypatch, tmp_path) -> None:
    _module(monkeypatch, "tiers_demo_helpers", HELPERS, where=tmp_path)  # e.g. a library's own code
    tests = _module(monkeypatch, "test_tiers_demo", USES_HELPERS)
    assert _tier(tests, "test_drives_the_app_through_two_helpers") == "unit"


def test_under_e2e_is_e2e_and_app_wins_over_model(monkeypatch) -> None:
    both = _module(
        monkeypatch,
        "test_tiers_both",
        "import transformers\nfrom streamlit.testing.v1 import AppTest\ndef test_x():\n  pass\n",
    )
    assert _tier(both, "test_x") == "app"
    assert _tier(both, "test_x", path=TESTS_DIR / "e2e" / "test_tiers_both.py") == "e2e"


def test_a_tier_given_by_hand() -> None:
    assert explicit_tier(["parametrize", "slow"]) == "slow"
    assert explicit_tier(["parametrize", "filterwarnings"]) is None
    with pytest.raises(ValueError, match="app, unit"):
        explicit_tier(["unit", "app"])


def test_this_test_got_its_tier_from_the_rule(request) -> None:
    assert {m.name for m in request.node.iter_markers()} & set(TIERS) == {"unit"}
    registered = {line.split(":")[0] for line in request.config.getini("markers")}
    assert set(TIERS) <= registered


@pytest.mark.model
def test_a_tier_written_on_the_test_wins(request) -> None:
    assert {m.name for m in request.node.iter_markers()} & set(TIERS) == {"model"}


def test_a_test_that_starts_a_process_is_e2e(monkeypatch) -> None:
    _module(
        monkeypatch,
        "tiers_demo_server",
        """
        import contextlib
        import subprocess

        @contextlib.contextmanager
        def start_server():
            yield subprocess.Popen(["true"])
        """,
    )
    tests = _module(
        monkeypatch,
        "test_tiers_process",
        """
        from streamlit.testing.v1 import AppTest
        from tiers_demo_server import start_server

        def server():
            with start_server() as proc:
                yield proc

        def test_through_a_fixture(server):
            assert server

        def test_through_a_local_import():
            from tiers_demo_server import start_server
            with start_server():
                pass
        """,
    )
    assert _tier(tests, "test_through_a_fixture", [tests.server]) == "e2e"
    assert _tier(tests, "test_through_a_fixture") == "app"
    assert _tier(tests, "test_through_a_local_import") == "e2e"
    kernel = _module(monkeypatch, "test_tiers_kernel", "def test_x():\n  import nbclient\n  nbclient.NotebookClient\n")
    assert _tier(kernel, "test_x") == "e2e"


def test_a_helper_imported_inside_the_test_is_followed(monkeypatch) -> None:
    _module(monkeypatch, "tiers_demo_helpers", HELPERS)
    tests = _module(
        monkeypatch, "test_tiers_inner", "def test_x():\n  from tiers_demo_helpers import run_app\n  run_app('')\n"
    )
    assert _tier(tests, "test_x") == "app"


def test_a_helper_module_imported_whole_is_followed_through_the_names_used(monkeypatch) -> None:
    """`import apptest_helpers as app` … `app.run_app()`: the helper the test names makes it app, not the module
    (whose AppTest is imported inside its functions, as tests/apptest_helpers.py does)."""
    lazy = HELPERS.replace("from streamlit.testing.v1 import AppTest\n", "").replace(
        "def run_app(script):\n", "def run_app(script):\n    from streamlit.testing.v1 import AppTest\n"
    )
    _module(monkeypatch, "tiers_demo_lazy", lazy)
    tests = _module(
        monkeypatch,
        "tiers_demo_whole",
        """
        import tiers_demo_lazy as helpers

        def test_app():
            helpers.run_twice("import streamlit")

        def test_unit():
            assert helpers.heatmaps(1)
        """,
    )
    assert _tier(tests, "test_app") == "app" and _tier(tests, "test_unit") == "unit"

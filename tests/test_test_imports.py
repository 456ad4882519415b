"""A house rule of the tests themselves (issue 36 §4): a test file imports the shared helper modules under tests/
(apptest_helpers, references, texts, zoo, stream_client, tiers) and conftest's fixtures, never another test file, so
that any test file runs alone and a helper has one home (read from the imports, AST, inside functions too)."""

from __future__ import annotations

import ast
from pathlib import Path

from tiers import TESTS_DIR


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (``test_*``, under tests/ or tests/e2e) that the file at ``path`` imports, anywhere in it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base] if base else []
            names += [f"{base}.{a.name}".lstrip(".") for a in node.names]  # `from tests import test_app`
        else:
            continue
        found += [n for n in names if n.split(".")[-1].startswith("test_")]
    return sorted(set(found))


def test_no_test_file_imports_another_test_file() -> None:
    files = sorted(TESTS_DIR.rglob("*.py"))
    assert len(files) > 50  # the whole folder was read
    wrong = {str(p.relative_to(TESTS_DIR)): found for p in files if (found := imported_test_modules(p))}
    assert not wrong, f"move what they share into tests/apptest_helpers.py (or another helper module): {wrong}"


def test_the_rule_sees_every_way_of_importing_a_test_file(tmp_path: Path) -> None:
    source = tmp_path / "test_x.py"
    source.write_text(
        "import numpy\nfrom apptest_helpers import run_app\nfrom test_app import run_app\n"
        "def f():\n    from tests.test_lesson import open_all\n    import test_models\n"
        "from tests import test_security\nfrom .test_replicas import up\n",
        encoding="utf-8",
    )
    want = ["test_app", "test_models", "test_replicas", "tests.test_lesson", "tests.test_security"]
    assert imported_test_modules(source) == want

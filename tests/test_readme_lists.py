"""The README's view table and command table list exactly the app's views and the CLI's commands (issue 21 §1.9:
the README had left out Next token, Induction and the `induction` command)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from mha_viz.cli.main import build_parser
from mha_viz.ui.sidebar import VIEWS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _first_column(header: str) -> list[str]:
    """The first cells of the README table whose header row starts with ``| header |``."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    cells = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells.append(line.split("|")[1].strip().strip("`"))
    return cells


def _commands() -> list[str]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def test_readme_view_table_is_the_app_views() -> None:
    assert _first_column("view") == list(VIEWS)


def test_readme_command_table_is_the_cli_commands() -> None:
    assert _first_column("command") == _commands()


def test_every_command_has_an_example_or_a_row() -> None:
    for command in _commands():
        assert re.search(rf"mha_viz {command}\b|mha-viz {command}\b|\| `{command}` \|", README), command

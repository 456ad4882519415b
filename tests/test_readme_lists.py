"""The view table (docs/views.md) and the command table (docs/cli.md) list exactly the app's views and the CLI's
commands (issue 21 §1.9: the README had left out Next token, Induction and the `induction` command); the README's
short list of views by group is the navigation's (issue 36 §5 moved the tables from the README to those pages)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from mha_viz.cli.main import build_parser
from mha_viz.ui.sidebar import VIEW_GROUPS, VIEWS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
VIEWS_PAGE = (ROOT / "docs" / "views.md").read_text(encoding="utf-8")
CLI_PAGE = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def _first_column(page: str, header: str) -> list[str]:
    """The first cells of the page's table whose header row starts with ``| header |``."""
    lines = page.splitlines()
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


def test_the_view_table_is_the_app_views() -> None:
    assert _first_column(VIEWS_PAGE, "view") == list(VIEWS)


def test_the_command_table_is_the_cli_commands() -> None:
    assert _first_column(CLI_PAGE, "command") == _commands()


def test_every_command_has_an_example_or_a_row() -> None:
    for command in _commands():
        assert re.search(rf"mha_viz {command}\b|mha-viz {command}\b|\| `{command}` \|", CLI_PAGE), command


def test_every_command_but_app_has_a_section_with_an_example() -> None:
    """docs/cli.md gives each exporting command its own section (``## `trace`: ...``) with a runnable example."""
    sections = {m.group(1): m.end() for m in re.finditer(r"^## `(\w+)`", CLI_PAGE, flags=re.MULTILINE)}
    for command in _commands():
        if command in ("models", "app"):
            continue
        assert command in sections, command
        body = CLI_PAGE[sections[command] :].split("\n## ", 1)[0]
        assert re.search(rf"python -m mha_viz {command}\b", body), command


def test_the_readme_lists_every_view_under_its_group() -> None:
    """The README's four bullets (``- **Look**: Heads, Lines, ...``) are the navigation's groups and views, in order."""
    listed = dict(re.findall(r"^- \*\*([^*]+)\*\*: (.+?);?$", README, flags=re.MULTILINE))
    groups = {}
    for group, views in listed.items():
        parts = re.split(r", (?![^(]*\))", views.rstrip(";."))  # commas outside brackets
        named = [re.sub(r" \(.*\)$", "", p.strip()) for p in parts]  # "the Lesson (the seven steps ...)"
        groups[group] = [v.removeprefix("the ") for v in named]
    assert groups == {g: list(v) for g, v in VIEW_GROUPS.items()}


def test_the_readme_help_line_names_every_command() -> None:
    """The README's `--help` example names the commands it lists, in the parser's order."""
    (line,) = [line for line in README.splitlines() if "python -m mha_viz --help" in line]
    assert [c.strip() for c in line.split("# ", 1)[1].split(",")] == _commands()

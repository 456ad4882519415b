"""The layout map (docs/architecture.md, moved there from the README by issue 36 §5) names every folder and module
of the package, under the right folder, and names nothing that is not there (issue 22 §1)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mha_viz"


def layout_block() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1]
    return section.split("```\n", 2)[1].splitlines()


def mapped() -> dict[str, set[str]]:
    """folder (relative to mha_viz, "" for the top) → the file and folder names the map lists under it."""
    found: dict[str, set[str]] = {}
    stack: list[tuple[int, str]] = []  # (indent, folder)
    inside = False
    for line in layout_block():
        indent = len(line) - len(line.lstrip(" "))
        if line.startswith("mha_viz/"):
            inside, stack = True, [(0, "")]
            continue
        if not inside or indent == 0:
            inside = inside and indent > 0
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        words = re.split(r"\s{2,}", line.strip())[0].split() if re.match(r"\s*[\w.]+(/|\.py|\.json)", line) else []
        names = [w for w in words if re.fullmatch(r"[\w]+(/|\.py|\.json)", w)]
        found.setdefault(parent, set()).update(names)
        if len(names) == 1 and names[0].endswith("/"):
            stack.append((indent, f"{parent}{names[0]}"))
    return found


def tree() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*"):
        if "__pycache__" in path.parts or path.name == "__init__.py" or path.suffix not in {".py", ".json", ""}:
            continue
        if path.is_dir() and not (path / "__init__.py").exists():
            continue
        parent = path.parent.relative_to(PACKAGE).as_posix()
        parent = "" if parent == "." else parent + "/"
        found.setdefault(parent, set()).add(path.name + ("/" if path.is_dir() else ""))
    return found


GROUPS = ("ui/views/", "serve/script/")  # folders the map names as a whole ("one file per view")


def test_every_folder_and_module_is_on_the_map() -> None:
    listed, real = mapped(), tree()
    for folder, names in real.items():
        if folder in GROUPS:
            continue
        missing = names - listed.get(folder, set())
        assert not missing, f"not on the map (docs/architecture.md) under mha_viz/{folder}: {sorted(missing)}"


def test_the_map_names_nothing_that_is_not_there() -> None:
    listed, real = mapped(), tree()
    for folder, names in listed.items():
        extra = names - real.get(folder, set())
        assert not extra, f"the map (docs/architecture.md) lists under mha_viz/{folder} what is not: {sorted(extra)}"

"""The README and its pages hold together (issue 36 §5): the README stays short, every relative link of the README,
docs/*.md and benchmarks/README.md leads to a file that exists (and to a heading there, for a link with #anchor), the
generated parts of docs/views.md and docs/models.md are what scripts/gen_docs.py writes, and the figures the README
quotes are the coverage run's."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200  # issue 36 §5: the README is a door, the pages behind it hold the rest
PAGES = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # [text](target), ![alt](src)


def _without_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code (a link written there is an example, not a link); a
    link's own text may be code (``[`cli.py`](...)``), so only code outside brackets' text is dropped."""
    return re.sub(r"(?<!\[)`[^`\n]*`(?!\])", "", _without_blocks(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (word characters, spaces and hyphens kept),
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on a Markdown page (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for line in _without_blocks(page.read_text(encoding="utf-8")).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    return LINK.findall(_prose(page.read_text(encoding="utf-8")))


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """The page's relative links whose file (or heading) does not exist inside ``root``."""
    bad = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        missing = not file.exists() or not file.resolve().is_relative_to(root)
        if missing or (anchor and (file.suffix != ".md" or anchor not in anchors(file))):
            bad.append(target)
    return bad


def test_the_pages_are_there() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    expected = {"views", "cli", "notebook", "models", "install", "hosting", "architecture", "index"}
    assert {f"docs/{n}.md" for n in expected} | {"README.md", "benchmarks/README.md"} <= names


def test_the_readme_is_at_most_200_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail to a page in docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    if page.name in ("README.md", "index.md"):  # the two doors: each leads on to the pages behind it
        assert links(page), "a door with no links leads nowhere"
    assert broken(page) == []


def test_the_link_check_sees_a_broken_link_and_a_wrong_anchor(tmp_path: Path) -> None:
    """The check itself: a missing file, a missing heading and a heading of another page fail; good ones pass."""
    (tmp_path / "b.md").write_text("# Two commands (fresh Debian machine with Python 3.11)\n## `why`: one head\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md) [ok](b.md#two-commands-fresh-debian-machine-with-python-311) [ok](b.md#why-one-head) "
        "[bad](c.md) [bad](b.md#two-commands) ![bad](img/x.png) [web](https://example.org/x) `[code](nowhere.md)`\n"
        "# Here\n[self](#here) [bad](#there)\n```\n[block](nowhere.md)\n```\n"
    )
    assert broken(page, tmp_path) == ["c.md", "b.md#two-commands", "img/x.png", "#there"]


def test_every_view_has_its_paragraph() -> None:
    from mha_viz.ui.about import ABOUT
    from mha_viz.ui.registry import VIEWS

    assert set(ABOUT) == set(VIEWS), "add the view's paragraph to mha_viz/ui/about.py, then run scripts/gen_docs.py"


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.model  # the catalog reads the installed transformers' modeling files (models.md: about 8 s)
@pytest.mark.parametrize("name", ["views", "models", "benchmarks"])
def test_the_generated_pages_are_what_the_script_writes(name: str) -> None:
    path, committed, generated = _gen_docs().generated(name)
    assert committed == generated, f"{path.name} is stale: run python scripts/gen_docs.py"


def test_the_view_page_names_every_view_and_its_file() -> None:
    """The generated block really comes from the registry: each view's row names its module's file."""
    from mha_viz.ui.about import ABOUT
    from mha_viz.ui.registry import REGISTRY

    page = (ROOT / "docs" / "views.md").read_text(encoding="utf-8")
    for v in REGISTRY:
        assert f"| {v.name} | {v.group} | " in page and f"(../mha_viz/ui/views/{v.module}.py) |" in page, v.name
        assert ABOUT[v.name].replace("|", "\\|") in page, v.name


def test_every_benchmark_script_is_on_the_benchmarks_page() -> None:
    page = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted((ROOT / "benchmarks").glob("*.py")) if f"[`{p.name}`]({p.name})" not in page]
    assert not missing, f"add a row for these to benchmarks/README.md's table of scripts: {missing}"


def test_the_readme_counts_are_the_coverage_run_s() -> None:
    """The README's "165 of the 233 text architectures in transformers 5.23" is read from coverage.json."""
    coverage = json.loads((ROOT / "mha_viz" / "models" / "coverage.json").read_text(encoding="utf-8"))
    types = coverage["types"]
    reproduced = sum(entry.get("status") == "reproduced" for entry in types.values())
    version = ".".join(coverage["transformers"].split(".")[:2])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quoted = f"{reproduced} of the {len(types)} text architectures in transformers {version}"
    assert quoted in " ".join(readme.split()), quoted


def test_the_index_links_every_page() -> None:
    """docs/index.md is the one list of pages: a page added to docs/ without a line there is found by nobody."""
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / target.partition("#")[0]).resolve() for target in links(index)}
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p != index and p.resolve() not in linked]
    assert not unlinked, f"add these to docs/index.md: {unlinked}"

"""The examples of the README and its pages (docs/*.md, benchmarks/README.md: issue 36 §5 moved most of them there)
say what they do and what they need (issue 35 §3): the notebook snippet is the one mha_viz.show documents, each call's
comment on its own line; every example that needs the network says so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import mha_viz.show as show

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in sorted(ROOT.glob("docs/*.md"))}
PAGES |= {"README.md": README, "benchmarks/README.md": (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")}


def _blocks(language: str, page: str = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page, flags=re.DOTALL)


@pytest.mark.parametrize("name", ["README.md", "docs/notebook.md"])
def test_the_notebook_snippet_is_show_s_own_with_each_comment_on_its_call(name: str) -> None:
    """The README's comments were shifted by a line (overview's "every layer × head" stood on the steps line)."""
    (readme,) = [b for b in _blocks("python", PAGES[name]) if "from mha_viz import show" in b]
    calls = [line for line in readme.splitlines() if "show." in line and "import" not in line]
    documented = [line.strip() for line in (show.__doc__ or "").splitlines() if line.startswith("    ")]
    assert calls == [line for line in documented if "show." in line and "import" not in line]
    called = [re.search(r"show\.(\w+)\(", line).group(1) for line in calls]
    assert set(called) == {n for n in show.__all__ if n not in ("loaded", "offline", "patterns", "trace")}
    comments = {name: line.split("  # ", 1)[1] for name, line in zip(called, calls, strict=True) if "  # " in line}
    assert set(comments) == set(called), "every call says what it shows"
    assert "layer × head" in comments["overview"] and "layer × head" not in comments["steps"]
    assert "seven steps" in comments["steps"] and "list of figures" in comments["steps"]


OFFLINE_NAMES = {"", "minilm", "default", "smollm2", "own", "all-minilm-l6-v2"}  # bundled, or no model at all


def test_every_example_that_needs_the_network_says_so() -> None:
    """Issue 35 §3.4: no encoder-decoder is bundled, and the README's `t5-small` example failed with no network
    without saying it needs one. Every code block naming a model that is not bundled says **(network)** in the block
    or in the paragraph that introduces it, on every page."""
    parts = [p for page in PAGES.values() for p in [*re.split(r"```\w*\n(.*?)```", page, flags=re.DOTALL), ""]]
    marked = []  # each page's parts are text, block, text, block, ..., text; the "" keeps the next page in step
    for i in range(1, len(parts), 2):
        block, intro = parts[i], parts[i - 1].strip().split("\n\n")[-1]
        names = [a or b for a, b in re.findall(r'--model (\S+)|model="([^"]*)"', block)]
        needs = [n for n in names if n.lower() not in OFFLINE_NAMES and not n.isupper()]  # M, NAME: placeholders
        if needs:
            assert "(network)" in block or "(network)" in intro, (needs, intro[-200:])
            marked.extend(needs)
    assert {"t5-small", "gpt2"} <= set(marked)  # the examples this test is about were seen
    assert (
        "no encoder-decoder is bundled" in README.lower() and "`mha-viz models` ends with what runs offline" in README
    )


def test_the_bundled_decoder_is_named_as_what_it_is() -> None:
    """Issue 35 §3.5: it is SmolLM2-135M-Instruct, dequantised from a 4-bit GGUF, wherever it is named."""
    from mha_viz.models.sources import SMOLLM2, SMOLLM2_ABOUT
    from mha_viz.ui.sidebar import SOURCE_NOTES

    assert SMOLLM2 == "SmolLM2-135M-Instruct"
    for name, page in PAGES.items():  # never the base model's name alone
        assert re.findall(r"SmolLM2-135M(?!-Instruct)\b", page) == [], name
    section = PAGES["docs/models.md"].split("## Two bundled models")[1].split("\n## ")[0]
    assert "`SmolLM2-135M-Instruct`" in section and "dequantised from a 4-bit" in section and "GGUF" in section
    for text in (SMOLLM2_ABOUT, SOURCE_NOTES["smollm2"]):
        assert "SmolLM2-135M-Instruct" in text and "4-bit" in text and "GGUF" in text


def test_the_sidebar_says_what_the_bundled_decoder_is() -> None:
    """The sidebar, where the bundled decoder is chosen, names it SmolLM2-135M-Instruct dequantised from a 4-bit GGUF
    (its radio label stays "SmolLM2-135M (bundled)": labels are link values, and shared links must keep working)."""
    from apptest_helpers import run_app

    at = run_app(src="SmolLM2-135M (bundled)", view="Heads")
    assert not at.exception, [e.value for e in at.exception]
    said = [c.value for c in at.sidebar.caption]
    assert any("SmolLM2-135M-Instruct" in c and "4-bit (Q4_1) GGUF" in c for c in said), said


def test_the_two_commands_say_how_long_they_take_and_how_to_move_the_port() -> None:
    """Issue 35 §3.6: the README said neither how long the first set-up and the suite take nor how to change the
    app's port; and the set-up's lock (tests/test_scripts.py) is named where the two scripts are."""
    section = README.split("## Two commands")[1].split("\n## ")[0]
    assert re.search(r"first set-up takes about \d+ minutes", section)
    assert re.search(r"whole suite takes about \d+ minutes", section)
    assert "bash scripts/app.sh --server.port 8600" in section and "flock" in section
    assert '"$@"' in (Path(__file__).resolve().parents[1] / "scripts" / "app.sh").read_text()  # it passes them on

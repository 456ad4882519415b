"""The example notebook runs in a real Jupyter kernel and its figures render with no network."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="nbclient is in requirements-dev.txt")
nbformat = pytest.importorskip("nbformat", reason="nbformat is in requirements-dev.txt")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "it_animal.ipynb"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
SCRIPT_SRC = re.compile(r"<script[^>]*\bsrc=", re.IGNORECASE)


# Cells run after the example notebook in the same kernel (one kernel start, one torch import and model load for
# the module): the example's own outputs are made first, as in a fresh kernel.
SHOW_TEXT = "The animal didn't cross the street because it was too tired"
SHOW_CELLS = [
    "from mha_viz import show",
    f"show.steps({SHOW_TEXT!r}, layer=3, head=1)",
    f"show.overview({SHOW_TEXT!r})",
    f"steps = show.steps({SHOW_TEXT!r}, layer=3, head=1)\nprint(len(steps), len(repr(steps)))\nsteps[:2]",
]


@pytest.fixture(scope="module")
def kernel_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    """The notebook run as the README says: by the venv's kernel, in a folder outside the checkout, with no
    PYTHONPATH (scripts/setup.sh installs the checkout into the venv, so `import mha_viz` works anywhere); then, in
    the same kernel, SHOW_CELLS. Returns (the example notebook executed, SHOW_CELLS executed)."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    example = len(nb.cells)
    nb.cells += [nbformat.v4.new_code_cell(s) for s in SHOW_CELLS]
    old = os.environ.pop("PYTHONPATH", None)  # the kernel inherits this process's environment
    try:
        client = nbclient.NotebookClient(
            nb, kernel_name="python3", timeout=300,
            resources={"metadata": {"path": str(tmp_path_factory.mktemp("elsewhere"))}},
        )  # fmt: skip
        client.execute()
    finally:
        if old is not None:
            os.environ["PYTHONPATH"] = old
    shown = nbformat.v4.new_notebook(cells=nb.cells[example:])
    nb.cells = nb.cells[:example]
    return nb, shown


@pytest.fixture(scope="module")
def executed(kernel_run) -> nbformat.NotebookNode:
    """The example notebook, executed (see kernel_run)."""
    return kernel_run[0]


def test_the_venv_has_the_package_outside_the_checkout(tmp_path: Path) -> None:
    """`import mha_viz` and `python -m mha_viz` work from any folder with the README's venv (issue 21 §1.8)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import mha_viz, pathlib; print(pathlib.Path(mha_viz.__file__).resolve().parent.parent)"
    found = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr[-500:]
    assert Path(found.stdout.strip()) == ROOT
    cli = subprocess.run([sys.executable, "-m", "mha_viz", "--help"], cwd=tmp_path, env=env, capture_output=True,
                         text=True)  # fmt: skip
    assert cli.returncode == 0 and "trace" in cli.stdout, cli.stderr[-500:]


def outputs(nb, source_contains: str) -> list[dict]:
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and source_contains in c.source]
    return cell.outputs


def stdout(outs: list[dict]) -> str:
    return "".join(o.get("text", "") for o in outs if o.get("name") == "stdout")


def html_of(out: dict) -> str:
    return "".join(out.get("data", {}).get("text/html", ""))


def test_the_kernel_is_this_python(executed):
    assert stdout(outputs(executed, "print(sys.executable)")).strip() == sys.executable


def test_the_head_that_links_it_to_animal_is_found(executed):
    text = stdout(outputs(executed, "show.found("))
    found = re.search(r"layer (\d+), head (\d+): 'it' -> 'animal' weight 0\.\d\d", text)
    assert found, text


def test_the_notebook_opens_the_apps_head_and_its_prose_names_it(executed):
    """Issue 35 §3.2: the notebook opened layer 5, head 11 (the largest weight) and described it, while the app,
    the README and show.found open layer 3, head 1 (analysis.opening, one rule everywhere)."""
    from mha_viz import show

    text = stdout(outputs(executed, "show.found("))
    layer, head = (int(x) for x in re.search(r"layer (\d+), head (\d+):", text).groups())
    sentence = "The animal didn't cross the street because it was too tired"
    assert (layer, head) == show.found(sentence)[:2] == show.found(sentence, "it", "animal")[:2] == (3, 1)
    prose = " ".join(c.source for c in executed.cells if c.cell_type == "markdown")
    assert "layer 3, head 1" in prose and "analysis.opening" in prose
    heads_fig = [o for o in outputs(executed, "show.head(") if PLOTLY_MIME in o.get("data", {})]
    assert f"Layer {layer}, head {head}:" in html_of(heads_fig[0])  # the figures draw that head


@pytest.mark.parametrize("call", ["show.heads(", "show.head(", "show.lines(", "show.focus("])
def test_every_figure_is_a_plotly_figure_drawn_offline(executed, call):
    figs = [o for o in outputs(executed, call) if PLOTLY_MIME in o.get("data", {})]
    assert len(figs) == 1, f"{call} shows one figure"
    html = html_of(figs[0])
    assert "Plotly.newPlot" in html
    assert not SCRIPT_SRC.search(html), "no script is fetched"
    # no CDN address (a bare "cdn" can occur by chance in the figure's base64-encoded arrays: layer 3's do)
    assert not re.search(r"//[\w.-]*cdn", html, re.IGNORECASE) and "https://" not in html


def test_plotly_js_is_in_the_notebook_once(executed):
    every = [html_of(o) for c in executed.cells if c.cell_type == "code" for o in c.outputs]
    inlined = [h for h in every if re.search(r"\* plotly\.js v\d", h)]
    assert len(inlined) == 1, "plotly.js is written once, before the first figure"
    first_figure = next(i for i, h in enumerate(every) if "Plotly.newPlot" in h)
    assert every.index(inlined[0]) < first_figure
    assert not any(SCRIPT_SRC.search(h) for h in every)


def test_every_show_result_ending_a_cell_is_drawn_as_figures(kernel_run) -> None:
    """Issue 35 §3.1: `show.steps(...)` as a cell's last line printed a 26,589-character list repr, not figures."""
    nb = kernel_run[1]
    assert [c.source for c in nb.cells] == SHOW_CELLS
    n, repr_chars = (int(x) for x in stdout(nb.cells[3].outputs).split())
    assert n >= 7 and repr_chars < 500  # every step, and a one-line repr
    for cell, figures in ((nb.cells[1], n), (nb.cells[2], 1), (nb.cells[3], 2)):
        drawn = [o for o in cell.outputs if PLOTLY_MIME in o.get("data", {})]
        assert len(drawn) == figures, (cell.source, [o.get("output_type") for o in cell.outputs])
        assert all("Plotly.newPlot" in html_of(o) for o in drawn)
        texts = ["".join(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in cell.outputs]
        assert max(len(t) for t in texts) < 500, "no long text repr beside the figures"
        assert not [o for o in cell.outputs if o.get("output_type") == "execute_result"]

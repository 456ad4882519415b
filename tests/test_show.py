"""mha_viz.show (the notebook API) and the HTML export: figures hold the trace's values, pages are self-contained."""

from __future__ import annotations

import re

import numpy as np
import pytest
from apptest_helpers import array, heatmaps

from mha_viz import figures, show
from mha_viz.analysis.referents import specific_head
from mha_viz.cli.main import main
from mha_viz.config import Config
from mha_viz.figures.html_page import page
from mha_viz.pipeline.road import traces
from mha_viz.trace import MhaVizError
from tests.conftest import SENTENCE

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

LAYER, HEAD = 5, 11
PLOTLY_JS_HEADER = re.compile(r"\* plotly\.js v\d")  # the banner at the top of every inlined plotly.js


@pytest.fixture(scope="module")
def reference(minilm):
    """Every layer's trace of the seed sentence, straight from the pipeline (not through show)."""
    tokens, _, found = traces(Config(), SENTENCE, lm=minilm)
    return tokens, found


def z_of(fig) -> list[np.ndarray]:
    return [array(t["z"]) for t in heatmaps(fig.to_plotly_json())]


def test_heads_grid_holds_every_heads_weights(reference):
    _, found = reference
    want = found[LAYER].pattern.numpy()  # [h, n, n]
    got = z_of(show.heads(SENTENCE, LAYER))
    assert len(got) == want.shape[0]
    for i, z in enumerate(got):
        np.testing.assert_allclose(z, want[i], atol=1e-6, err_msg=f"head {i}")


def test_head_and_focus_bars_hold_the_trace(reference):
    tokens, found = reference
    p = found[LAYER].pattern.numpy()
    (z,) = z_of(show.head(SENTENCE, LAYER, HEAD))
    np.testing.assert_allclose(z, p[HEAD], atol=1e-6)
    q = tokens.labels.index("it")
    bars = [t for t in show.focus(SENTENCE, LAYER, token="it").data if t.type == "bar"]
    assert len(bars) == p.shape[0]
    for i, b in enumerate(bars):
        np.testing.assert_allclose(np.asarray(b.y, dtype=float), p[i, q], atol=1e-6)


def test_overview_tiles_are_the_patterns(reference):
    _, found = reference
    stack = np.stack([t.pattern.numpy() for t in found])  # [L, H, n, n]
    L, H, n, _ = stack.shape
    canvas = z_of(show.overview(SENTENCE))[0]
    for la, h in [(0, 0), (LAYER, HEAD), (L - 1, H - 1)]:
        tile = canvas[la * (n + 2) : la * (n + 2) + n, h * (n + 2) : h * (n + 2) + n]
        np.testing.assert_allclose(tile, stack[la, h], atol=1e-6)


def test_lines_is_the_lines_tabs_figure_of_the_trace(reference):
    tokens, found = reference
    t = found[LAYER]
    q = tokens.labels.index("it")
    sel = figures.select_lines(t.pattern.numpy(), [HEAD], q)
    assert sel.weight.size > 0
    want = figures.attention_lines(t.pattern.numpy(), t.tokens, t.key_tokens, sel, "x").to_plotly_json()
    got = show.lines(SENTENCE, LAYER, heads=[HEAD], focus="it").to_plotly_json()
    assert got["data"] == want["data"]


def test_steps_follow_the_computation(reference):
    _, found = reference
    t = found[LAYER]
    figs = show.steps(SENTENCE, LAYER, HEAD)
    titles = [f.layout.title.text for f in figs]
    by_step = {title.split(".")[0]: z_of(f)[0] for title, f in zip(titles, figs, strict=True)}
    np.testing.assert_allclose(by_step["1"], t.x.numpy(), atol=1e-6)
    np.testing.assert_allclose(by_step["3"], (t.q[HEAD] @ t.k[HEAD].T).numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(by_step["6"], t.pattern[HEAD].numpy(), atol=1e-6)
    np.testing.assert_allclose(by_step["7c"], t.output.numpy(), atol=1e-6)
    assert [s[0] for s in by_step] == ["1", "2", "2", "2", "3", "4", "5", "6", "7", "7", "7"]


def test_found_is_the_specific_head_on_all_layers(reference):
    tokens, found = reference
    stack = np.stack([t.pattern.numpy() for t in found])
    want = specific_head(stack, tokens.labels.index("it"), tokens.labels.index("animal"))[:3]
    assert show.found(SENTENCE, "it", "animal") == pytest.approx(want)


def test_model_loaded_once():
    assert show.loaded("", "cpu") is show.loaded("", "cpu")


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: show.heads(SENTENCE, 6), "layers 0 to 5"),
        (lambda: show.head(SENTENCE, 0, 12), "heads 0 to 11"),
        (lambda: show.focus(SENTENCE, 0, token="zebra"), "not in the text"),
        (lambda: show.heads("   ", 0), "non-empty"),
        (lambda: show.lines(SENTENCE, 0, heads=[]), "give 1 to"),
        (lambda: show.heads(SENTENCE, 0, model="own"), "pretrained"),
    ],
)
def test_bad_input_is_a_clear_error(call, words):
    with pytest.raises(MhaVizError, match=words):
        call()


def test_offline_renderer_inlines_nothing_from_the_network():
    import plotly.io as pio

    show.offline()
    from mha_viz.figures.notebook import RENDERER

    assert pio.renderers.default == RENDERER
    bundle = pio.renderers[RENDERER].to_mimebundle(show.head(SENTENCE, 0, 0).to_plotly_json())
    assert "Plotly.newPlot" in bundle["text/html"]
    assert "application/vnd.plotly.v1+json" in bundle
    assert not re.search(r"<script[^>]*\bsrc=", bundle["text/html"]), "no script is fetched"


def script_srcs(doc: str) -> list[str]:
    return re.findall(r"<script[^>]*\bsrc=[\"']?([^\"' >]+)", doc)


def test_page_has_one_plotly_js_and_no_url():
    figs = show.steps(SENTENCE, LAYER, HEAD)
    doc = page(figs, "steps", {"model": "all-MiniLM-L6-v2", "layer": "5"}, SENTENCE)
    assert len(PLOTLY_JS_HEADER.findall(doc)) == 1
    assert doc.count("Plotly.newPlot") == len(figs)
    assert script_srcs(doc) == []
    assert not re.search(r"<(link|img|iframe)[^>]*(href|src)=[\"']?https?:", doc)
    assert "<dt>layer</dt><dd>5</dd>" in doc


def test_page_escapes_the_text_and_settings():
    hostile = '<script>alert(1)</script> & "it"'
    doc = page([show.head(SENTENCE, 0, 0)], "<b>t</b>", {"model": "<img src=x onerror=alert(2)>"}, hostile)
    assert "<script>alert(1)</script>" not in doc and "<img src=x" not in doc and "<b>t</b>" not in doc
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;it&quot;" in doc
    with pytest.raises(MhaVizError, match="nothing to export"):
        page([], "t", {}, "x")


def test_export_cli_writes_a_page(tmp_path, capsys):
    out = tmp_path / "heads.html"
    assert main(["export", "--view", "heads", "--text", SENTENCE, "--out", str(out), "--device", "cpu"]) == 0
    doc = out.read_text(encoding="utf-8")
    assert len(PLOTLY_JS_HEADER.findall(doc)) == 1 and script_srcs(doc) == []
    layer = show.found(SENTENCE, "it", "animal")[0]
    assert f"<dt>layer</dt><dd>{layer}</dd>" in doc  # the found layer, as the app opens on
    assert html_escaped(SENTENCE) in doc
    assert "wrote" in capsys.readouterr().out


def html_escaped(text: str) -> str:
    import html

    return html.escape(text)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--view", "heads", "--out", "x.txt"], "must name a .html file"),
        (["--view", "heads", "--layer", "9", "--out", "x.html"], "layers 0 to 5"),
        (["--view", "nope", "--out", "x.html"], "invalid choice"),
    ],
)
def test_export_cli_bad_input_is_one_line(args, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["export", "--text", SENTENCE, "--device", "cpu", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err
    assert not (tmp_path / "x.html").exists()


def test_a_trace_ending_a_notebook_cell_is_one_line(reference):
    """Issue 35 §3.1: show.trace's result printed every tensor (a 53,532-character repr) as a cell's last line."""
    t = reference[1][LAYER]
    text = repr(t)
    assert "\n" not in text and len(text) < 300
    assert f"{t.n_heads} heads" in text and str(list(t.pattern.shape)) in text

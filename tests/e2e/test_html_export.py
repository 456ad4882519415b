"""An exported view opens from a file in Chromium with the network blocked: the figures draw, the text and
settings are written on it, and a hostile text is shown as text, never run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from mha_viz import show
from mha_viz.cli.main import main
from tests.conftest import SENTENCE

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)> it was tired"


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("export")
    runs = {
        "heads": ["--view", "heads", "--text", SENTENCE],
        "steps": ["--view", "steps", "--text", SENTENCE, "--layer", "5", "--head", "11"],
        "hostile": ["--view", "head", "--text", HOSTILE, "--layer", "0", "--head", "0"],
    }
    out = {}
    for name, args in runs.items():
        out[name] = folder / f"{name}.html"
        assert main(["export", *args, "--device", "cpu", "--out", str(out[name])]) == 0
    return out


@pytest.fixture
def offline_page(browser: Browser) -> Iterator[tuple[Page, list[str], list[str]]]:
    """A page whose every non-file request is aborted (and listed), and whose dialogs are listed and dismissed."""
    context = browser.new_context(viewport={"width": 1400, "height": 1800})
    blocked: list[str] = []
    dialogs: list[str] = []

    def route(r) -> None:
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        yield page, blocked, dialogs
    finally:
        context.close()


def heatmap_traces(page: Page) -> list[int]:
    """For each drawn Plotly figure, how many heatmap traces it holds."""
    return page.evaluate(
        "() => [...document.querySelectorAll('.js-plotly-plot')]"
        ".map(g => (g._fullData || []).filter(t => t.type === 'heatmap').length)"
    )


def test_heads_export_draws_offline(exports, offline_page):
    page, blocked, _ = offline_page
    page.goto(exports["heads"].as_uri())
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
    assert page.locator(".js-plotly-plot .main-svg").count() >= 1
    assert heatmap_traces(page) == [12], "one figure, one heatmap per head"
    assert page.locator("blockquote").inner_text() == SENTENCE
    settings = dict(zip(page.locator("dt").all_inner_texts(), page.locator("dd").all_inner_texts(), strict=True))
    layer = show.found(SENTENCE, "it", "animal")[0]  # no --layer: the opening head's layer, computed, not assumed
    assert settings["view"] == "heads" and settings["layer"] == str(layer) and settings["model"] == "all-MiniLM-L6-v2"
    assert blocked == [], "the page asked for nothing outside the file"


def test_steps_export_draws_every_step(exports, offline_page):
    page, blocked, _ = offline_page
    page.goto(exports["steps"].as_uri())
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 11", timeout=60_000)
    assert all(n >= 1 for n in heatmap_traces(page)) and len(heatmap_traces(page)) == 11
    assert blocked == []


def test_hostile_text_is_shown_not_run(exports, offline_page):
    page, blocked, dialogs = offline_page
    page.goto(exports["hostile"].as_uri())
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
    page.wait_for_timeout(500)  # time for an injected handler to fire, were there one
    assert dialogs == [], "no alert ran"
    assert page.locator("blockquote").inner_text() == HOSTILE
    assert page.locator("body img").count() == 0
    assert page.locator("body script").count() == 3  # window.PlotlyConfig, plotly.js, the one figure: nothing injected
    assert blocked == []

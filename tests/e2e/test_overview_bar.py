"""The Overview's colour bar sits on its grid in a real browser: SmolLM2's 30 layers × 9 heads make a grid much
narrower than the page (square tiles), and the bar used to sit at the plot's right edge beyond an empty band."""

from __future__ import annotations

from urllib.parse import quote

from playwright.sync_api import Page, expect

from e2e.conftest import RENDER_TIMEOUT_MS, wait_for_run

GAP_PX = 40  # the most room between the bar and the grid's top edge (its tick labels sit between them)


def test_the_colour_bar_sits_on_a_narrow_grid(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/?view=Overview&src={quote('SmolLM2-135M (bundled)')}")
    wait_for_run(page)
    chart = page.locator(".st-key-view_panel .js-plotly-plot").first
    grid = chart.locator("g.hm image")  # the grid of tiles: one heatmap image
    expect(grid).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    bar = chart.locator("g.colorbar")  # the colour bar (bar, ticks and title)
    expect(bar).to_have_count(1)
    g, b = grid.bounding_box(), bar.bounding_box()
    assert g is not None and b is not None
    page_w = chart.bounding_box()["width"]
    assert g["width"] < 0.6 * page_w, (g, page_w)  # the case: a grid far narrower than the chart
    assert abs(b["x"] - g["x"]) <= GAP_PX, (b, g)  # the bar starts where the grid starts
    assert b["x"] + b["width"] <= g["x"] + g["width"] + GAP_PX, (b, g)  # and ends over it, not beyond a band
    assert 0 <= g["y"] - (b["y"] + b["height"]) <= GAP_PX, (b, g)  # right above the grid

"""The Patching view in a real browser (issue 24 Tests): the layer × head map of recovered is drawn, its top head is
the one the view lists first, and a click on that cell opens the head in Heads."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from e2e.browser_helpers import EXCEPTION, expect_heads_view, open_app, open_tab
from e2e.conftest import RENDER_TIMEOUT_MS, wait_for_run

LAYERS, HEADS = 6, 12  # MiniLM


def test_a_click_on_the_patching_map_opens_the_head(page: Page, app_url: str) -> None:
    open_app(page, app_url, "?view=Patching")
    panel = page.locator(".st-key-view_panel")
    top = panel.locator("ol > li").filter(has_text=re.compile(r"^layer \d+, head \d+: recovered")).first  # rank 1
    expect(top).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    layer, head = map(int, re.match(r"layer (\d+), head (\d+)", top.inner_text()).groups())
    click_cell(page, layer, head)
    expect_heads_view(page, layer, head)

    other = ((layer + 1) % LAYERS, (head + 5) % HEADS)  # a second cell: the click, not a default, opens the head
    open_tab(page, "Patching")
    click_cell(page, *other)
    expect_heads_view(page, *other)
    expect(page.locator(EXCEPTION)).to_have_count(0)


def click_cell(page: Page, layer: int, head: int) -> None:
    """Click the centre of the map's cell (layer 0 is the top row: the y axis is reversed; head 0 the left column)."""
    panel = page.locator(".st-key-view_panel")
    chart = panel.locator(".js-plotly-plot").filter(has=page.locator("text.gtitle", has_text="Recovered by patching"))
    image = chart.locator("g.hm image")
    expect(image).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    chart.scroll_into_view_if_needed()
    box = image.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + (head + 0.5) * box["width"] / HEADS, box["y"] + (layer + 0.5) * box["height"] / LAYERS)
    wait_for_run(page)

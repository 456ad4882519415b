"""The one module of shared browser helpers for the e2e tests (issue 36 §4: test files import helpers, never each
other): open the app, open a tab, find the first chart and its heatmaps, click a grid cell or an Overview tile."""

from __future__ import annotations

import re

from playwright.sync_api import Locator, Page, expect

from e2e.conftest import RENDER_TIMEOUT_MS, wait_for_run

EXCEPTION = "[data-testid='stException']"


def open_app(page: Page, app_url: str, query: str = "") -> None:
    page.goto(f"{app_url}/{query}")
    wait_for_run(page)


def first_chart(page: Page) -> Locator:
    """The first Plotly chart of the open tab."""
    return page.locator(".st-key-view_panel").locator(".js-plotly-plot").first


def heatmaps(chart: Locator) -> Locator:
    return chart.locator("g.hm")  # one per heatmap trace (each draws one <image>)


def open_tab(page: Page, name: str) -> None:
    """Open the view ``name``: its group first (Learn, Look, Explain, What if), when its tab is not shown."""
    from mha_viz.ui.sidebar import GROUP_OF

    tab = page.get_by_role("tab", name=name, exact=True)
    if tab.count() == 0:
        page.get_by_role("radio", name=GROUP_OF[name], exact=True).click()
        wait_for_run(page)
    tab.click()
    wait_for_run(page)
    expect(tab).to_have_attribute("aria-selected", "true")


def click_overview_tile(page: Page, layer: int, head: int) -> None:
    """Click the Overview tile of (layer, head) on the seed sentence and wait for the run it starts."""
    chart = first_chart(page)
    image = chart.locator("g.hm image")
    expect(image).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    chart.scroll_into_view_if_needed()
    box = image.bounding_box()
    assert box is not None
    n, gap, layers, heads = 15, 2, 6, 12  # the seed sentence: 15-token tiles, 2-cell gaps
    step = n + gap
    width, height = heads * step - gap, layers * step - gap  # cells across the canvas
    page.mouse.click(
        box["x"] + (head * step + n / 2) * box["width"] / width,
        box["y"] + (layer * step + n / 2) * box["height"] / height,
    )
    wait_for_run(page)


def opened_head_title(page: Page, layer: int, head: int) -> object:
    """The opened head's heatmap title in the Heads tab (Plotly draws titles as text.gtitle)."""
    title = re.compile(rf"^Layer {layer}, head {head}: attention weights \[15 × 15\]$")
    return page.locator(".st-key-view_panel").locator("text.gtitle").filter(has_text=title)


def expect_heads_view(page: Page, layer: int, head: int) -> None:
    expect(page.get_by_role("tab", name="Heads", exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.get_by_label("Layer")).to_have_value(str(layer))
    expect(page.get_by_label("Open head")).to_have_value(f"head {head}")
    expect(opened_head_title(page, layer, head)).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    expect(page.locator(EXCEPTION)).to_have_count(0)


def click_grid_cell(page: Page, subplot: str, q: int, k: int, n: int = 15) -> None:
    chart = first_chart(page)
    expect(heatmaps(chart)).to_have_count(12, timeout=RENDER_TIMEOUT_MS)
    chart.scroll_into_view_if_needed()
    box = chart.locator(f"g.subplot.{subplot} g.hm image").bounding_box()
    assert box is not None
    x, y = box["x"] + (k + 0.5) * box["width"] / n, box["y"] + (q + 0.5) * box["height"] / n
    # Plotly clicks the point it hovers: on a busy machine a click sent before the hover was drawn was lost (the head
    # stayed closed). Away first, so the label waited for is this cell's.
    label = page.locator(".hoverlayer .hovertext")
    page.mouse.move(1, 1)
    expect(label).to_have_count(0)
    page.mouse.move(x, y, steps=3)
    expect(label.first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    page.mouse.click(x, y)
    wait_for_run(page)

"""The Two sentences tab in a real browser: choosing a ranked head (a radio option) and a click on the layer × head
map both open that head below (the bars' and heatmaps' titles name it, the shown layer/head go into the link)."""

from __future__ import annotations

import re

from playwright.sync_api import Locator, Page, expect

from e2e.conftest import RENDER_TIMEOUT_MS, wait_for_run

ROW = re.compile(r"^\d\. layer (\d+), head (\d+): moved [+-]\d\.\d{3}")  # a ranked head (a radio option)
EXCEPTION = "[data-testid='stException']"


def panel(page: Page) -> Locator:
    return page.locator(".st-key-view_panel")


def title(page: Page, layer: int, head: int) -> Locator:
    """The shared keys' bars' title for that head: a panel's title in the bars' chart (Plotly draws a chart's title as
    text.gtitle, a panel's as text.annotation-text)."""
    return (
        panel(page)
        .locator("text.gtitle, text.annotation-text")
        .filter(has_text=re.compile(rf"^Layer {layer}, head {head}: “it” attends"))
    )


def test_open_button_and_map_click_open_the_head(page: Page, app_url: str) -> None:
    page.goto(f"{app_url}/?view=Two+sentences")
    wait_for_run(page)
    expect(page.get_by_role("tab", name="Two sentences", exact=True)).to_have_attribute("aria-selected", "true")
    expect(panel(page).locator(".js-plotly-plot").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    expect(page.get_by_role("button", name="Swap tired ↔ wide")).to_be_visible()

    rows = panel(page).locator(".st-key-two_top label").filter(has_text=ROW)
    expect(rows).to_have_count(5)  # the top 5
    m = ROW.match(rows.nth(2).inner_text().strip())  # the third-ranked head
    assert m is not None
    layer, head = int(m[1]), int(m[2])
    expect(title(page, layer, head)).to_have_count(0)  # the top head is shown first, not this one
    rows.nth(2).click()
    wait_for_run(page)
    expect(title(page, layer, head)).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    expect(page.get_by_label("Shown layer")).to_have_value(str(layer))
    expect(page.get_by_label("Shown head")).to_have_value(str(head))
    titles = panel(page).locator("text.gtitle, text.annotation-text")  # two charts' titles, or one chart's two panels'
    heatmap_titles = titles.filter(has_text=f"Layer {layer}, head {head}: the ")
    expect(heatmap_titles).to_have_count(2)  # the head's pattern in each sentence
    expect(page).to_have_url(re.compile(rf"[?&]two_layer={layer}(&|$)"))

    # A click on a cell of the layer × head map (6 layers × 12 heads) opens that head as well.
    to_layer, to_head = (2, 9) if (layer, head) != (2, 9) else (1, 4)
    chart = panel(page).locator(".js-plotly-plot").first
    image = chart.locator("g.hm image")
    expect(image).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    chart.scroll_into_view_if_needed()
    box = image.bounding_box()
    assert box is not None
    x = box["x"] + (to_head + 0.5) * box["width"] / 12
    y = box["y"] + (to_layer + 0.5) * box["height"] / 6
    page.mouse.move(x, y, steps=3)  # Plotly clicks the hovered point: wait until the hover is on this cell
    expect(page.locator(".hoverlayer .hovertext")).to_contain_text(f"layer {to_layer}, head {to_head}: moved")
    page.mouse.click(x, y)
    wait_for_run(page)
    expect(title(page, to_layer, to_head)).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    expect(page.get_by_label("Shown layer")).to_have_value(str(to_layer))
    expect(page.get_by_role("tab", name="Two sentences", exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.locator(EXCEPTION)).to_have_count(0)


def test_long_text_swaps_the_bare_word_and_focuses_on_the_first_it(page: Page, app_url: str) -> None:
    """A 492-token text starting with the seed sentence (issue 21 §1.4): the word is "tired" (not "tired."), the
    focus is the first "it", the page says which occurrence, and the top head moved more than ±0.000."""
    from urllib.parse import quote

    sentence = "The animal didn't cross the street because it was too tired."
    page.goto(f"{app_url}/?view=Two+sentences&text={quote(' '.join([sentence] * 35))}")
    wait_for_run(page)
    expect(panel(page).locator(".js-plotly-plot").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    expect(page.get_by_role("button", name="Swap tired ↔ wide", exact=True)).to_be_visible()
    expect(panel(page).get_by_text("the focus is the 1st of 35 (token 10)")).to_be_visible()
    top = panel(page).locator(".st-key-two_top label").filter(has_text=ROW).first
    expect(top).not_to_contain_text(re.compile(r"moved [+-]0\.000"))
    expect(page.locator(EXCEPTION)).to_have_count(0)

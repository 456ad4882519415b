"""One opened head, in a real browser (issue 22 §3): a click on a cell of the Heads grid opens that head, and Step by
step shows the same head next; the page's link, from Heads and from Step by step, opens it again in a new session
(tests/e2e/test_shared_url.py has the other shares)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from e2e.browser_helpers import EXCEPTION, click_grid_cell, expect_heads_view, open_app, open_tab
from e2e.conftest import RENDER_TIMEOUT_MS, new_context, wait_for_run


@pytest.fixture
def fresh(browser: Browser) -> Iterator[Page]:
    """A page in a new browser context: a new Streamlit session, nothing shared but the link."""
    ctx = new_context(browser)
    yield ctx.new_page()
    ctx.close()


@pytest.fixture
def second(browser: Browser) -> Iterator[Page]:
    """Another page in a browser context of its own (a second shared link)."""
    ctx = new_context(browser)
    yield ctx.new_page()
    ctx.close()


def open_view(page: Page, name: str) -> None:
    """Open a view's tab, first choosing the group of views it is in where the views are grouped."""
    tab = page.get_by_role("tab", name=name, exact=True)
    groups = page.locator("[data-testid='stButtonGroup'] button[data-testid^='stBaseButton']")
    for i in range(groups.count()):
        if tab.is_visible():
            break
        groups.nth(i).click()
        wait_for_run(page)
    open_tab(page, name)


def expect_step_head(page: Page, layer: int, head: int) -> None:
    """Step by step is open on ``head`` of ``layer``: its picker and its caption say so, and its steps are drawn."""
    panel = page.locator(".st-key-view_panel")
    expect(page.get_by_role("tab", name="Step by step", exact=True)).to_have_attribute("aria-selected", "true")
    expect(panel.get_by_label("Head", exact=True)).to_have_value(f"head {head}")
    expect(panel.get_by_text(re.compile(rf"^Layer {layer}, head {head}: n = "))).to_have_count(1)
    title = re.compile(rf"^2a\. Q_{head} = ")
    titles = panel.locator("text.gtitle, text.annotation-text")  # a chart's title, or a panel's over a pair of matrices
    expect(titles.filter(has_text=title)).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    expect(page.locator(EXCEPTION)).to_have_count(0)


def test_a_head_clicked_in_the_grid_is_the_head_step_by_step_shows(
    page: Page, fresh: Page, second: Page, app_url: str
) -> None:
    """Before: Step by step opened on head 0 whatever head the Heads tab had open. The click's head survives a share
    of the Heads link and of the Step by step link (each opened in a new browser context). No layer in the first
    link: the app opens on the found head's layer (not 0), which the link does not name; a link with a head and no
    layer opens layer 0, so the click must write the layer too."""
    open_app(page, app_url, "?view=Heads")
    layer = int(page.get_by_label("Layer").input_value())
    assert layer != 0 and "layer=" not in page.url
    click_grid_cell(page, "x4y4", q=2, k=10)  # head 3 (first row, fourth column), query "animal"
    expect_heads_view(page, layer, 3)
    expect(page.get_by_label("Focus token (query)")).to_have_value("animal")
    expect(page).to_have_url(re.compile(r"[?&]head=head\+3(&|$)"))
    expect(page).to_have_url(re.compile(rf"[?&]layer={layer}(&|$)"))

    open_app(fresh, app_url, page.url.removeprefix(app_url + "/"))  # the Heads link
    expect_heads_view(fresh, layer, 3)
    expect(fresh.get_by_label("Focus token (query)")).to_have_value("animal")

    open_view(page, "Step by step")
    expect_step_head(page, layer, 3)
    expect(page).to_have_url(re.compile(r"[?&](step_)?head=head\+3(&|$)"))

    open_app(second, app_url, page.url.removeprefix(app_url + "/"))  # the Step by step link opens the same head
    expect_step_head(second, layer, 3)
    open_view(second, "Heads")
    expect_heads_view(second, layer, 3)

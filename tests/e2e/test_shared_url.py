"""State that survives a share, in a real browser: what a click or a control changed is in page.url, and that
URL opened in a new browser context (a new Streamlit session, nothing shared but the link) shows the same view."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from e2e.browser_helpers import (
    click_overview_tile,
    expect_heads_view,
    open_app,
    open_tab,
)
from e2e.conftest import RENDER_TIMEOUT_MS, new_context, wait_for_run


@pytest.fixture
def fresh(browser: Browser) -> Iterator[Page]:
    """A page in a new browser context: no cookies, no storage, a new Streamlit session."""
    ctx = new_context(browser)
    yield ctx.new_page()
    ctx.close()


# A click on the Heads grid that survives a share: tests/e2e/test_opened_head.py (the same click, then Step by step).


def test_open_head_picker_survives_a_share(page: Page, fresh: Page, app_url: str) -> None:
    """The "Open head" picker lives in a fragment; its link must name the layer too (as a grid click's: a link with a
    head and no layer opens layer 0)."""
    open_app(page, app_url, "?view=Heads")
    layer = int(page.get_by_label("Layer").input_value())
    page.get_by_label("Open head").click()
    page.get_by_role("option", name="head 7", exact=True).click()
    wait_for_run(page)
    expect_heads_view(page, layer, 7)
    expect(page).to_have_url(re.compile(rf"[?&]layer={layer}(&|$)"))

    open_app(fresh, app_url, page.url.removeprefix(app_url + "/"))
    expect_heads_view(fresh, layer, 7)


def test_overview_click_survives_a_share(page: Page, fresh: Page, app_url: str) -> None:
    """A session that starts on Overview never drew the Heads tab's "Open head": before set_linked the tile
    opened head 5 but the URL had no head=, so the shared link opened the layer's found head (or head 0)."""
    open_app(page, app_url, "?view=Overview")
    click_overview_tile(page, 3, 5)
    expect_heads_view(page, 3, 5)  # the tile opens its head in Heads (was test_browser's own test)
    expect(page).to_have_url(re.compile(r"[?&]head=head\+5(&|$)"))
    expect(page).to_have_url(re.compile(r"[?&]layer=3(&|$)"))

    open_app(fresh, app_url, page.url.removeprefix(app_url + "/"))
    expect_heads_view(fresh, 3, 5)


def test_wo_seed_and_rollout_layer_survive_a_share(page: Page, fresh: Page, app_url: str) -> None:
    open_app(page, app_url, "?view=W^O")
    page.get_by_text("random orthogonal", exact=True).click()
    wait_for_run(page)
    seed = page.get_by_label("Seed")
    seed.fill("4242")
    seed.press("Enter")
    wait_for_run(page)
    expect(page).to_have_url(re.compile(r"[?&]wo_seed=4242(&|$)"))

    open_app(fresh, app_url, page.url.removeprefix(app_url + "/"))
    expect(fresh.get_by_role("tab", name="W^O", exact=True)).to_have_attribute("aria-selected", "true")
    expect(fresh.get_by_label("Seed")).to_have_value("4242")

    open_tab(page, "Rollout")
    thumb = page.get_by_role("slider", name="Up to layer")
    expect(thumb).to_have_value("5")
    thumb.focus()
    thumb.press("ArrowLeft")
    thumb.press("ArrowLeft")
    wait_for_run(page)
    expect(thumb).to_have_value("3")
    expect(page).to_have_url(re.compile(r"[?&]rollout_layer=3(&|$)"))
    title = page.locator("text.gtitle").filter(has_text="Rollout through layers 0–3")
    expect(title).to_have_count(1, timeout=RENDER_TIMEOUT_MS)

    fresh.goto(page.url)
    wait_for_run(fresh)
    expect(fresh.get_by_role("tab", name="Rollout", exact=True)).to_have_attribute("aria-selected", "true")
    expect(fresh.get_by_role("slider", name="Up to layer")).to_have_value("3")
    expect(fresh.locator("text.gtitle").filter(has_text="Rollout through layers 0–3")).to_have_count(1)

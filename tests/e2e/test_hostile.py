"""Hostile text in a real browser: shown as text everywhere, no element, attribute or link made from it,
nothing executed (no dialog, no page error)."""

from __future__ import annotations

from urllib.parse import urlencode

from playwright.sync_api import Page, expect

from e2e.browser_helpers import open_tab
from e2e.conftest import RENDER_TIMEOUT_MS, wait_for_run

PAYLOADS = (
    "<img src=x onerror=alert(1)>",
    "<svg onload=alert(2)>",
    '<a href="javascript:alert(3)">link</a>',
    '<span style="font-size:60px">big</span>',
    "&lt;img src=x onerror=alert(4)&gt;",
    r"$\href{javascript:alert(5)}{click}$",
)
TEXT = " ".join(PAYLOADS)
INJECTED = (
    "img[src='x'], img[onerror], svg[onload], a[href^='javascript'], [style*='font-size:60px'], "
    "[style*='font-size: 60px'], .katex a"
)


def watch(page: Page) -> list[str]:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    return dialogs


def test_hostile_text_in_every_input_stays_text(page: Page, app_url: str) -> None:
    dialogs = watch(page)
    query = urlencode({"text": TEXT, "view": "Two sentences", "text_b": TEXT + " wide"})
    page.goto(f"{app_url}/?{query}")
    wait_for_run(page)
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    for view in ("Where does it look?", "Step by step", "Head roles", "Heads"):
        open_tab(page, view)
        expect(page.locator(INJECTED)).to_have_count(0)
    # The token labels on the axes carry the pieces of the payloads as plain text.
    chart = page.locator(".st-key-view_panel").locator(".js-plotly-plot").first
    expect(chart.locator("g.hm")).to_have_count(12, timeout=RENDER_TIMEOUT_MS)
    texts = chart.locator("g[class^='y'][class$='tick'] text").all_text_contents()
    assert any(t.startswith("<") for t in texts) and any(t.startswith(">") for t in texts), texts
    assert page.get_by_label("Text (Ctrl+Enter to apply)", exact=True).input_value() == TEXT
    assert dialogs == []


def test_hostile_model_id_error_is_text(page: Page, app_url: str) -> None:
    dialogs = watch(page)
    bad_id = PAYLOADS[0]
    page.goto(f"{app_url}/?{urlencode({'src': 'Hugging Face', 'model_id': bad_id})}")
    wait_for_run(page)
    alert = page.locator("[data-testid='stAlert']").first
    expect(alert).to_contain_text(bad_id)  # the message quotes the id literally
    expect(page.locator(INJECTED)).to_have_count(0)
    assert dialogs == []

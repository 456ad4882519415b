"""The dashboard in a real browser (headless Chromium), served by `streamlit run app.py`, bundled model.

What is checked is what a person sees: Plotly's SVG (one `g.hm` group per heatmap trace, tick labels,
subplot titles, the hover label), the tabs, the URL, and Streamlit's alerts.
"""

from __future__ import annotations

import re
from urllib.parse import quote_plus

from playwright.sync_api import Locator, Page, expect

from conftest import SENTENCE
from e2e.browser_helpers import EXCEPTION, first_chart, heatmaps, open_app, open_tab
from e2e.conftest import RENDER_TIMEOUT_MS, wait_for_run
from mha_viz.config import Config
from mha_viz.pipeline.road import traces

VIEWS = ("Lesson", "Heads", "Compare heads", "Head count", "W^O", "Step by step", "Overview")  # the app may add more
CONTENT = ".js-plotly-plot, [data-testid='stDataFrame'], [data-testid='stTable']"  # a tab's figures or tables
DECODER_ONLY = ("Next token", "Induction")  # on the bundled encoder these say what they need instead
INFO = "[data-testid='stAlertContentInfo']"
ERROR_ALERT = "[data-testid='stAlert']:has([data-testid='stAlertContentError'])"
HOVER = re.compile(r"^(.+) → (.+): (\d\.\d{3})$")  # query → key: weight (also a valid JS regex)


def tick(chart: Locator, label: str, axis: str = "x") -> Locator:
    """The tick labels ``label`` of the chart (x or y axes; the head grid labels its outer axes only,
    so a token appears once per outer axis)."""
    return chart.locator(ticks(axis)).filter(has_text=re.compile(f"^{re.escape(label)}$"))


def ticks(axis: str = "x") -> str:
    """Tick label texts of every x (or y) axis: Plotly names them xtick, x9tick, ... per subplot axis."""
    return f"g[class^='{axis}'][class$='tick'] text"


def head_title(i: int) -> re.Pattern:
    return re.compile(rf"^head {i}( · .+)?$")  # "head 3", or with a role label: "head 3 · previous token"


def head_titles(n: int) -> list[re.Pattern]:
    return [head_title(i) for i in range(n)]


def type_text(page: Page, text: str) -> None:
    """Clear the sidebar text area, type ``text``, press Ctrl+Enter (Enter is a new line), and wait for the run."""
    box = page.get_by_label("Text (Ctrl+Enter to apply)", exact=True)
    box.fill("")
    box.press_sequentially(text)
    box.press("Control+Enter")
    wait_for_run(page)


def test_typed_text_shows_twelve_heads_and_empty_text_an_error(page: Page, app_url: str) -> None:
    """Typed text changes the Heads grid; blank text then shows an error, and the next text is drawn again."""
    open_app(page, app_url, "?view=Heads&text=humpty+dumpty+sat+on")  # start elsewhere: typing must change it
    chart = first_chart(page)
    expect(tick(chart, "dump").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    expect(tick(chart, "animal")).to_have_count(0)

    type_text(page, SENTENCE)
    expect(heatmaps(chart)).to_have_count(12, timeout=RENDER_TIMEOUT_MS)
    expect(chart.locator(".annotation-text")).to_have_text(head_titles(12))
    for label in ("animal", "the (1)", "the (7)", "[CLS]", "[SEP]"):
        expect(tick(chart, label, "x")).to_have_count(4)  # the bottom row's four key axes
        expect(tick(chart, label, "y")).to_have_count(3)  # the left column's three query axes
    expect(tick(chart, "dump")).to_have_count(0)
    expect(page.get_by_label("Text (Ctrl+Enter to apply)", exact=True)).to_have_value(SENTENCE)

    type_text(page, "   ")
    expect(page.locator(ERROR_ALERT)).to_have_count(1)
    expect(page.locator(ERROR_ALERT)).to_contain_text("empty")
    expect(page.locator(EXCEPTION)).to_have_count(0)

    type_text(page, "The cat sat on the mat and the cat slept")
    expect(page.locator(ERROR_ALERT)).to_have_count(0)
    expect(page.locator(EXCEPTION)).to_have_count(0)
    chart = first_chart(page)
    expect(heatmaps(chart)).to_have_count(12, timeout=RENDER_TIMEOUT_MS)
    expect(tick(chart, "mat")).to_have_count(4)  # once per bottom key axis
    expect(tick(chart, "cat (2)")).to_have_count(4)


def test_hover_shows_the_real_weight(page: Page, app_url: str, minilm) -> None:
    _, _, (trace,) = traces(Config(), SENTENCE, layers=[0], lm=minilm)
    tokens, pattern = list(trace.tokens), trace.pattern.numpy()  # pattern [12, n, n]
    n = len(tokens)
    open_app(page, app_url, "?view=Heads&layer=0")  # without a layer the app opens on the "it" → "animal" head
    chart = first_chart(page)
    expect(heatmaps(chart)).to_have_count(12, timeout=RENDER_TIMEOUT_MS)
    expect(chart.locator(ticks("x"))).to_have_count(4 * n)  # four bottom key axes, shared by each column
    assert chart.locator(ticks("x")).all_text_contents()[:n] == tokens  # left to right
    chart.scroll_into_view_if_needed()
    cells = chart.locator("g.subplot.xy g.hm image")  # head 0's n × n cells
    expect(cells).to_have_count(1)
    box = cells.bounding_box()
    assert box is not None and box["width"] > 3 * n and box["height"] > 3 * n, box
    label = page.locator(".hoverlayer .hovertext text.nums")
    for query, key in (("it", "animal"), ("the (7)", "street"), ("[CLS]", "[SEP]"), ("tired", "the (1)")):
        page.mouse.move(1, 1)  # away first, so that the label read below is this cell's
        expect(label).to_have_count(0)
        q, k = tokens.index(query), tokens.index(key)
        page.mouse.move(box["x"] + (k + 0.5) * box["width"] / n, box["y"] + (q + 0.5) * box["height"] / n, steps=3)
        expect(label).to_have_text(HOVER)
        expect(page.locator(".hoverlayer .hovertext text.name")).to_have_text(head_title(0))
        m = HOVER.match(label.text_content() or "")
        assert m is not None
        shown_query, shown_key, shown = m[1], m[2], float(m[3])
        assert (shown_query, shown_key) == (query, key), "the hover names another cell than the one under the mouse"
        real = float(pattern[0, tokens.index(shown_query), tokens.index(shown_key)])
        assert abs(shown - real) <= 0.0005, f"{query} → {key}: shown {shown}, model {real:.6f}"


def test_every_tab_renders(page: Page, app_url: str) -> None:
    """Every view is one group button and one tab away, both inside the 1280 px page (no tab strip to scroll),
    and opens without an error (issue 22 §2: 11 of 18 tabs were visible)."""
    from mha_viz.ui.sidebar import GROUP_OF, VIEW_GROUPS

    open_app(page, app_url, "?view=Overview")  # Overview from the URL, clicked again last: a round trip
    expect(page.get_by_role("tab", name="Overview", exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.get_by_role("radio", name="Look", exact=True)).to_be_checked()
    width = page.viewport_size["width"]
    for group in VIEW_GROUPS:
        box = page.get_by_role("radio", name=group, exact=True).bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, (group, box)
    names = [v for v in VIEWS if v != "Overview"]
    for name in (*names, "Overview"):
        open_tab(page, name)
        expect(page.get_by_role("radio", name=GROUP_OF[name], exact=True)).to_be_checked()
        box = page.get_by_role("tab", name=name, exact=True).bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, (name, box)  # visible without scrolling
        expect(page.locator(EXCEPTION)).to_have_count(0)
        expect(page.locator(ERROR_ALERT)).to_have_count(0)
        panel = page.locator(".st-key-view_panel")
        if name in DECODER_ONLY:
            expect(panel.locator(INFO).first).to_contain_text("decoder", timeout=RENDER_TIMEOUT_MS)
            continue
        expect(panel.locator(CONTENT).first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(first_chart(page)).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        if name != VIEWS[0]:
            expect(page).to_have_url(re.compile(rf"[?&]view={re.escape(quote_plus(name))}(&|$)"))


def test_url_restores_tab_and_head_count_and_the_selector_regroups_the_heads(page: Page, app_url: str) -> None:
    """A link with a view and a head count opens both; the selector then regroups the heads and writes the link.
    (One page for what two tests opened: the tab switch to Head count is test_every_tab_renders'.)"""
    open_app(page, app_url, "?view=Head+count&hc=6")
    expect(page.get_by_role("tab", name="Head count", exact=True)).to_have_attribute("aria-selected", "true")
    select = page.get_by_role("combobox", name="Head count")
    expect(select).to_have_value("6")
    chart = first_chart(page)
    expect(heatmaps(chart)).to_have_count(6, timeout=RENDER_TIMEOUT_MS)
    expect(chart.locator(".annotation-text")).to_have_text(head_titles(6))

    select.click()
    expect(page.get_by_role("option")).to_have_text(["1", "2", "3", "4", "6", "8", "12", "16", "24", "32", "48", "64"])
    page.get_by_role("option", name="4", exact=True).click()
    wait_for_run(page)
    expect(select).to_have_value("4")
    expect(heatmaps(chart)).to_have_count(4, timeout=RENDER_TIMEOUT_MS)
    expect(chart.locator(".annotation-text")).to_have_text(head_titles(4))
    expect(page).to_have_url(re.compile(r"[?&]hc=4(&|$)"))
    expect(page.locator(EXCEPTION)).to_have_count(0)


# A click on an Overview tile and on a cell of the Heads grid: tests/e2e/test_shared_url.py opens the head that way and
# checks the page (tab, layer, head, focus token, link) before it checks the shared link.

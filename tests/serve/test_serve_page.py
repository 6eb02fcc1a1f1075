"""The page at `/` in a real headless Chromium (Debian's `chromium`, driven by Playwright): it
loads, a fill-mask query shows the test model's known top answer, and a screenshot is kept; a
server that needs a key gets it from a field on the page, which says when a key is missing or wrong."""

import os
from pathlib import Path

import pytest

from serve_fixtures import Running, serving_hub

CHROMIUM = Path("/usr/bin/chromium")
# No network, no updates, no first-run work: the browser only talks to the loopback server.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} not found (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


@pytest.mark.slow
def test_the_page_fills_a_mask_in_a_real_browser(shared_data, browser, tmp_path, one_thread):
    running = Running(serving_hub(shared_data))
    try:
        page = browser.new_page()
        page.goto(running.url + "/")
        page.wait_for_selector("body[data-ready=true]", timeout=20_000)
        assert "2 layers, hidden 32" in page.inner_text("#model")
        page.fill("#mask-text", "The capital of France is <mask>.")
        page.click("#mask-go")
        page.wait_for_selector("#mask-results .row", timeout=20_000)
        tokens = page.locator("#mask-results .row .token").all_inner_texts()
        assert tokens[0].strip() == "Paris" and len(tokens) == 5
        page.fill("#mask-text", "no mask")
        page.click("#mask-go")
        page.wait_for_selector("#mask-results .error", timeout=20_000)
        assert "exactly one <mask>" in page.inner_text("#mask-results")
        page.click("#predict-go")
        page.wait_for_selector("#predict-results .row", timeout=20_000)
        page.fill("#mask-text", "The capital of France is <mask>.")
        page.click("#mask-go")
        page.wait_for_selector("#mask-results .row", timeout=20_000)
        screenshot = tmp_path / "serve-page.png"
        page.screenshot(path=str(screenshot), full_page=True)
        assert screenshot.stat().st_size > 10_000
    finally:
        running.stop()


@pytest.mark.slow
def test_the_page_asks_for_the_key_of_a_server_that_needs_one(shared_data, browser, one_thread):
    running = Running(serving_hub(shared_data), api_key=("page-key-123",))
    try:
        page = browser.new_page()
        page.goto(running.url + "/")  # the page itself needs no key
        page.wait_for_selector("#key-form:not(.hidden)", timeout=20_000)
        assert "needs an API key" in page.inner_text("#model")
        page.fill("#key", "not-the-key")
        page.click("#key-go")
        page.wait_for_function("document.getElementById('model').textContent.includes('refused')")
        page.fill("#key", "page-key-123")
        page.click("#key-go")
        page.wait_for_selector("body[data-ready=true]", timeout=20_000)
        assert "2 layers, hidden 32" in page.inner_text("#model")
        page.click("#mask-go")
        page.wait_for_selector("#mask-results .row", timeout=20_000)
        assert page.locator("#mask-results .row .token").all_inner_texts()[0].strip() == "Paris"
        # The key stays in the tab: a reload is ready without asking again.
        page.reload()
        page.wait_for_selector("body[data-ready=true]", timeout=20_000)
        assert page.evaluate("sessionStorage.getItem('roberta-serve-key')") == "page-key-123"
    finally:
        running.stop()

"""``servelab ui`` in a real headless browser (Debian's chromium + chromedriver, driven by Selenium):
the leaderboard, sorting, filtering, a run page, a comparison, and a screenshot."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from servelab.store.imports import read_results
from servelab.server.process import free_port, wait_ready
from servelab.store.database import Store, database_url
from servelab.report.ui import make_app

FIXTURES = Path(__file__).parent / "fixtures"
CHROMIUM, DRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or "/usr/bin/chromedriver"
pytestmark = pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)), reason="needs Debian's chromium and chromium-driver")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The ui on a free port over a database with a servelab run (qwen3-8b on vLLM, H100), one
    with a hostile model name, and llama-benchy's CSV and JSON."""
    import uvicorn

    tmp = tmp_path_factory.mktemp("ui")
    store = Store(database_url(str(tmp / "runs.db")))
    for name, model in (("h100", None), ("evil", "<script>alert('x')</script>")):
        doc = json.loads((FIXTURES / "runs" / "vllm-0.25-h100-qwen3-8b-run.json").read_text())
        if model:
            doc["endpoint"]["model"], doc["started_at"] = model, "2026-01-01T00:00:00+00:00"
        (tmp / name).mkdir()
        (tmp / name / "run.json").write_text(json.dumps(doc))
        store.add(read_results(tmp / name))
    for f in ("llama-benchy-0.4.0-gemma-270m.csv", "llama-benchy-0.4.0-gemma-270m.json"):
        store.add(read_results(FIXTURES / "imports" / f))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(store), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_ready(f"http://127.0.0.1:{port}/", 30, [], "servelab ui")
    yield f"http://127.0.0.1:{port}", tmp
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(site):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--window-size=1600,1000", f"--user-data-dir={site[1] / 'chrome'}"):  # fmt: skip
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


def cells(browser, column: int) -> list[str]:
    """The text of one leaderboard column: 0 the tick box, then model, engine, hardware, traffic, level, the metrics."""
    from selenium.webdriver.common.by import By

    return [row.find_elements(By.TAG_NAME, "td")[column].text for row in browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr")[1:]]


def navigate(browser, element) -> None:
    """Click ``element`` and wait until the browser has left the current page and loaded the next one
    (no stale reads). The current document is marked, and the wait ends on a complete document without
    the mark; a call that lands while the old document is torn down fails in chromedriver with "Node with
    given id does not belong to the document" (not a stale-element error) and is simply asked again."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    browser.execute_script("window.__servelab_page = true")
    element.click()
    WebDriverWait(browser, 30, ignored_exceptions=(WebDriverException,)).until(
        lambda b: b.execute_script("return window.__servelab_page === undefined && document.readyState === 'complete'"))


def number(text: str) -> float:
    return float(text.replace(",", "")) if text not in ("–", "") else float("inf")


def test_leaderboard_sort_filter_run_page_and_compare(site, browser, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    url, _ = site
    browser.get(url + "/")
    assert browser.find_element(By.TAG_NAME, "h1").text == "servelab leaderboard"
    rows = browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr")[1:]
    assert len(rows) > 8
    shot = tmp_path / "leaderboard.png"
    browser.save_screenshot(str(shot))
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000
    if os.environ.get("SERVELAB_SCREENSHOTS"):
        shutil.copy(shot, Path(os.environ["SERVELAB_SCREENSHOTS"]) / "leaderboard.png")
    assert "<script>alert('x')</script>" in browser.page_source.replace("&lt;", "<").replace("&gt;", ">")  # shown as text…
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # …never run

    navigate(browser, browser.find_element(By.ID, "sort-ttft_ms_p50"))  # lower is better: ascending first
    assert "sort=ttft_ms_p50" in browser.current_url
    ttft_col = 6 + [k for k, _ in __import__("servelab.report.html", fromlist=["COLUMNS"]).COLUMNS].index("ttft_ms_p50")
    values = [number(v) for v in cells(browser, ttft_col)]
    assert values == sorted(values) and values[0] < float("inf")
    navigate(browser, browser.find_element(By.ID, "sort-ttft_ms_p50"))  # again: descending, missing values still last
    known = [v for v in (number(v) for v in cells(browser, ttft_col)) if v < float("inf")]
    assert known == sorted(known, reverse=True)

    box = browser.find_element(By.NAME, "model")
    box.clear()
    box.send_keys("gemma")
    navigate(browser, browser.find_element(By.ID, "apply"))
    assert "model=gemma" in browser.current_url
    assert set(cells(browser, 1)) == {"google/gemma-3-270m"}
    boxes = browser.find_elements(By.CSS_SELECTOR, "input[name=ids]")
    ids = []
    for b in boxes:  # one row of each of the two llama-benchy runs
        if b.get_attribute("value") not in ids:
            ids.append(b.get_attribute("value"))
            b.click()
    navigate(browser, browser.find_element(By.ID, "compare"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Comparison of 2 runs"
    assert len(browser.find_elements(By.CSS_SELECTOR, "img[src^='data:image/png']")) == 3

    browser.get(url + "/?model=qwen3-8b")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "a.run"))
    assert "/runs/" in browser.current_url
    assert "qwen3-8b · vllm" in browser.find_element(By.TAG_NAME, "h1").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "img[src^='data:image/png']")) >= 3
    navigate(browser, browser.find_element(By.LINK_TEXT, "← leaderboard"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "servelab leaderboard"


def test_unknown_run_and_bad_sort_are_http_errors(site, browser):
    import urllib.error
    import urllib.request

    url, _ = site
    for path, code in (("/runs/nosuch", 404), ("/?sort=bogus", 400), ("/compare", 400)):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url + path, timeout=10)
        assert err.value.code == code

"""The web page at / in a real browser: headless Chromium (Debian's chromium and
chromium-driver) driven by selenium."""

from __future__ import annotations

import shutil

import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="the page tests need selenium")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ready  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from ragloop.config import Settings  # noqa: E402
from tests.server.conftest import KEYS, serving  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="no Chromium here: install Debian's chromium and chromium-driver (make test does)",
)


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1200,1600",
    ):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=DRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    yield driver
    driver.quit()


def wait(browser, seconds: float = 60) -> WebDriverWait:
    return WebDriverWait(browser, seconds)


def turns(browser) -> list:
    return browser.find_elements(By.CSS_SELECTOR, "#thread .turn")


def ask(browser, url: str, question: str, *, follow_up: bool = False):
    """Ask ``question`` on the page (a fresh page, unless it follows up in the thread) and
    wait until its answer is there, whatever its state; the turn."""
    if not follow_up:
        browser.get(url + "/")
    before = len(turns(browser))
    box = browser.find_element(By.ID, "question")
    box.clear()
    box.send_keys(question)
    browser.find_element(By.ID, "ask").click()
    return settled(browser, before + 1)


def settled(browser, n: int):
    """The ``n``th turn of the thread, once it is no longer working."""

    def done(b):
        found = turns(b)
        if len(found) < n or found[n - 1].get_attribute("data-state") == "working":
            return None
        return found[n - 1]

    return wait(browser).until(done)


def test_a_person_asks_watches_the_iterations_and_follows_a_citation(browser, kb_file, tmp_path):
    with serving(kb_file, Settings(), tmp_path) as (url, _):  # no keys: local only
        turn = ask(browser, url, "How much does the Skylark 2 weigh?")
        turn.find_element(By.CSS_SELECTOR, ".work > summary").click()  # the work, folded
        steps = turn.find_elements(By.CSS_SELECTOR, ".steps .step")
        assert steps, "each iteration is shown as it arrives"
        first = steps[0].text
        assert "Iteration 1" in first
        assert "query" in first
        assert "skylark.md" in first
        assert "verdict" in first  # the evaluator's score and reason
        answer = turn.find_element(By.CSS_SELECTOR, ".answer-text").text
        assert "2.1 kg" in answer
        cite = turn.find_element(By.CSS_SELECTOR, ".answer-text a.cite")
        cite.click()
        source = wait(browser).until(
            lambda b: turn.find_element(By.CSS_SELECTOR, ".sources li.active")
        )
        assert "skylark.md" in source.text
        chunk = wait(browser).until(
            ready.visibility_of_element_located((By.CSS_SELECTOR, "li.active .passage"))
        )
        assert "2.1 kg" in chunk.text
        assert "stopped:" in turn.find_element(By.CSS_SELECTOR, ".stop-line").text
        link = turn.find_element(By.CSS_SELECTOR, ".trace-link")
        run_id = link.get_attribute("data-run-id")
        assert run_id
        link.click()
        wait(browser).until(lambda b: len(b.window_handles) > 1)
        browser.switch_to.window(browser.window_handles[-1])
        wait(browser).until(lambda b: "Skylark" in b.page_source)
        assert run_id[:12] in browser.page_source
        browser.close()
        browser.switch_to.window(browser.window_handles[0])


def test_with_keys_the_page_asks_for_one_and_the_key_limits_what_it_sees(
    browser, kb_file, tmp_path
):
    from tests.server.conftest import key_settings

    with serving(kb_file, key_settings(), tmp_path) as (url, _):
        browser.get(url + "/")
        key = wait(browser).until(ready.visibility_of_element_located((By.ID, "api-key")))
        browser.find_element(By.ID, "question").send_keys("What does the Nimbus tent weigh?")
        browser.find_element(By.ID, "ask").click()
        status = wait(browser).until(ready.text_to_be_present_in_element((By.ID, "status"), "401"))
        assert status
        assert settled(browser, 1).get_attribute("data-state") == "error"
        key.send_keys(KEYS["alice"])
        browser.execute_script(
            "document.getElementById('api-key').dispatchEvent(new Event('change'))"
        )
        ask(browser, url, "What does the Nimbus tent weigh?", follow_up=True)
        page = browser.find_element(By.TAG_NAME, "main").text
        assert "launch.md" not in page
        assert "900 grams" not in page
        options = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#collection option")]
        assert any(o.startswith("public") for o in options)
        assert not any(o.startswith("secret") for o in options)
        browser.execute_script("localStorage.clear()")


def test_an_unsure_answer_shows_what_was_found_and_what_was_not(browser, kb_file, tmp_path):
    with serving(kb_file, Settings(), tmp_path) as (url, _):
        turn = ask(
            browser, url, "How much does the Skylark 2 weigh, and what does a helicopter cost?"
        )
        assert turn.get_attribute("data-state") == "unsure"
        gaps = turn.find_element(By.CSS_SELECTOR, ".gaps")
        assert gaps.is_displayed()
        assert gaps.text.startswith("What was found and what was not:")
        parts = [li.text for li in gaps.find_elements(By.CSS_SELECTOR, ".gap-parts li")]
        assert parts[0].startswith("found How much does the Skylark 2 weigh")
        assert "skylark.md" in parts[0]
        assert parts[1].startswith("not found what does a helicopter cost")
        searches = turn.find_element(By.CSS_SELECTOR, ".gap-searches").text
        assert "Searched: How much does the Skylark 2 weigh" in searches
        shown = turn.find_element(By.CSS_SELECTOR, ".answer-text")  # evidence first
        assert shown.text.startswith("No sure answer was found in the documents.")
        assert "The closest passages, best first:" in shown.text
        closest = shown.find_elements(By.CSS_SELECTOR, "ol > li")
        assert closest  # the closest passages, each with its source
        assert ".md" in closest[0].text
        assert "chance right" in turn.find_element(By.CSS_SELECTOR, ".chance").text
        sure = ask(browser, url, "How much does the Skylark 2 weigh?")  # confident: no report
        assert "2.1" in sure.find_element(By.CSS_SELECTOR, ".answer-text").text
        assert sure.get_attribute("data-state") == "confident"
        assert not sure.find_element(By.CSS_SELECTOR, ".gaps").is_displayed()


def test_an_earlier_question_whose_sources_changed_is_marked_stale(browser, tmp_path):
    from tests.server.conftest import build_kb

    kb_path = build_kb(tmp_path / "kb.sqlite")
    with serving(kb_path, Settings(), tmp_path) as (url, service):  # no keys: local only
        browser.get(url + "/")
        browser.execute_script("localStorage.clear()")
        ask(browser, url, "How much does the Skylark 2 weigh?")
        wait(browser).until(
            lambda b: b.execute_script(
                "return JSON.parse(localStorage.getItem('ragloop-history') || '[]')[0].run_id"
            )
        )
        browser.get(url + "/")
        history = browser.find_element(By.ID, "history")
        wait(browser).until(lambda b: "Skylark" in history.text)
        assert not browser.find_elements(By.CSS_SELECTOR, "#history .stale-mark")
        service.kb.add_documents(
            [{"source": "skylark.md", "text": "The Skylark 2 weighs 1.9 kg packed."}],
            collection="public",
        )
        browser.get(url + "/")
        mark = wait(browser).until(
            ready.visibility_of_element_located((By.CSS_SELECTOR, "#history .stale-mark"))
        )
        assert mark.text == "stale"
        title = browser.find_element(By.CSS_SELECTOR, "#history button").get_attribute("title")
        assert "skylark.md edited" in title

"""The web page's round-3 features in headless Chromium (issue 31, item 21): the answer comes
first and the loop's work below it, folded; an error is shown in the error colour; earlier
questions are kept in localStorage and asked again with a click; an admin lists, adds and
removes documents (issue 60: after a confirmation that names the document)."""

from __future__ import annotations

import pytest

pytest.importorskip("selenium.webdriver", reason="the page tests need selenium")

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready

from ragloop.config import Settings
from tests.server import test_page
from tests.server.conftest import KEYS, build_kb, key_settings, serving

# the browser of the page tests (one headless Chromium per module), their helpers and skip
browser = test_page.browser
pytestmark = test_page.pytestmark
ask, wait = test_page.ask, test_page.wait

ERROR_RED = "rgb(185, 28, 28)"  # --bad


def colour(browser, element_id: str) -> str:
    script = "return getComputedStyle(document.getElementById(arguments[0])).color"
    return str(browser.execute_script(script, element_id))


def test_the_answer_comes_first_and_the_work_is_folded_below_it(browser, kb_file, tmp_path):
    with serving(kb_file, Settings(), tmp_path) as (url, _):
        turn = ask(browser, url, "How much does the Skylark 2 weigh?")
        answer = turn.find_element(By.CSS_SELECTOR, ".answer")
        work = turn.find_element(By.CSS_SELECTOR, ".work")
        assert "2.1 kg" in turn.find_element(By.CSS_SELECTOR, ".answer-text").text
        assert answer.location["y"] < work.location["y"]  # the answer above the loop's work
        assert work.get_attribute("open") is None  # folded once the answer is there
        assert "step" in turn.find_element(By.CSS_SELECTOR, ".work-count").text
        step = turn.find_element(By.CSS_SELECTOR, ".steps .step")
        assert not step.is_displayed()
        turn.find_element(By.CSS_SELECTOR, ".work > summary").click()
        assert step.is_displayed()
        assert "Iteration 1" in step.text
        browser.save_screenshot("/tmp/page.png")


def test_an_error_is_shown_in_the_error_colour(browser, kb_file, tmp_path):
    with serving(kb_file, key_settings(), tmp_path) as (url, _):
        browser.get(url + "/")
        browser.execute_script("localStorage.clear()")
        browser.refresh()
        browser.find_element(By.ID, "question").send_keys("What does a tent cost?")
        browser.find_element(By.ID, "ask").click()  # no key given: a 401
        wait(browser).until(ready.text_to_be_present_in_element((By.ID, "status"), "401"))
        assert colour(browser, "status") == ERROR_RED  # not the status line's muted grey
        turn = test_page.settled(browser, 1)
        assert turn.get_attribute("data-state") == "error"
        assert "401" in turn.find_element(By.CSS_SELECTOR, ".problem").text
        assert not turn.find_element(By.CSS_SELECTOR, ".work").is_displayed()  # no work to show
        browser.save_screenshot("/tmp/page-401.png")
        browser.find_element(By.ID, "api-key").send_keys(KEYS["alice"])
        browser.execute_script(
            "document.getElementById('api-key').dispatchEvent(new Event('change'))"
        )
        ask(browser, url, "What does a tent cost?", follow_up=True)
        assert colour(browser, "status") != ERROR_RED  # "done" is not an error
        browser.execute_script("localStorage.clear()")


def test_earlier_questions_are_kept_and_asked_again_with_a_click(browser, kb_file, tmp_path):
    with serving(kb_file, Settings(), tmp_path) as (url, _):
        browser.get(url + "/")
        browser.execute_script("localStorage.clear()")
        ask(browser, url, "How much does the Skylark 2 weigh?")
        ask(browser, url, "How much is tent hire for a weekend?")
        browser.refresh()  # kept in this browser across page loads
        entries = wait(browser).until(
            lambda b: b.find_elements(By.CSS_SELECTOR, "#history li button") or None
        )
        assert [e.text for e in entries] == [
            "How much is tent hire for a weekend?",
            "How much does the Skylark 2 weigh?",
        ]
        entries[1].click()  # asked again, in a conversation of its own
        turn = test_page.settled(browser, 1)
        assert "2.1 kg" in turn.find_element(By.CSS_SELECTOR, ".answer-text").text
        assert turn.find_element(By.CSS_SELECTOR, ".asked-text").text.startswith(
            "How much does the Skylark 2"
        )
        assert len(test_page.turns(browser)) == 1
        again = browser.find_elements(By.CSS_SELECTOR, "#history li button")
        assert again[0].text == "How much does the Skylark 2 weigh?"  # moved to the top
        assert len(again) == 2
        browser.execute_script("localStorage.clear()")


def rows(browser) -> list[str]:
    """The sources listed, read in one script (the list is redrawn as it reloads)."""
    script = "return [...document.querySelectorAll('#doc-list tr')].map((r) => r.dataset.source)"
    return list(browser.execute_script(script))


def test_an_admin_lists_adds_and_removes_documents(browser, tmp_path):
    kb_path = build_kb(tmp_path / "kb.sqlite")  # this test changes it
    upload = tmp_path / "tarp.md"
    upload.write_text("# Tarp\n\nThe ridge tarp weighs 450 grams.\n", encoding="utf-8")
    with serving(kb_path, Settings(), tmp_path) as (url, _):  # no keys: this machine, admin
        browser.get(url + "/")
        panel = wait(browser).until(ready.visibility_of_element_located((By.ID, "documents")))
        wait(browser).until(lambda b: len(rows(b)) == 5)
        assert rows(browser)[0] == "hire.md"
        assert "1–5 of 5" in browser.find_element(By.ID, "doc-range").text

        browser.find_element(By.ID, "doc-file").send_keys(str(upload))
        browser.find_element(By.ID, "doc-add").click()
        wait(browser).until(ready.text_to_be_present_in_element((By.ID, "doc-status"), "added 1"))
        wait(browser).until(lambda b: "tarp.md" in rows(b))
        assert "1–6 of 6" in browser.find_element(By.ID, "doc-range").text

        row = 'tr[data-source="tarp.md"]'
        panel.find_element(By.CSS_SELECTOR, f"{row} button.remove").click()
        question = panel.find_element(By.CSS_SELECTOR, "tr.confirm-row .confirm")
        assert question.text.startswith("Remove tarp.md from default?")  # it asks, naming it
        assert "tarp.md" in rows(browser)
        panel.find_element(By.CSS_SELECTOR, "tr.confirm-row button.cancel-remove").click()
        assert not panel.find_elements(By.CSS_SELECTOR, "tr.confirm-row")
        assert "tarp.md" in rows(browser)  # cancelled: nothing removed
        panel.find_element(By.CSS_SELECTOR, f"{row} button.remove").click()
        browser.save_screenshot("/tmp/page-documents.png")
        panel.find_element(By.CSS_SELECTOR, "tr.confirm-row button.confirm-remove").click()
        wait(browser).until(ready.text_to_be_present_in_element((By.ID, "doc-status"), "removed"))
        wait(browser).until(lambda b: "tarp.md" not in rows(b))


def test_a_key_that_is_not_admin_sees_no_documents_panel(browser, kb_file, tmp_path):
    with serving(kb_file, key_settings(), tmp_path) as (url, _):
        browser.get(url + "/")
        browser.execute_script(f"localStorage.setItem('ragloop-key', '{KEYS['alice']}')")
        browser.refresh()
        wait(browser).until(
            lambda b: len(b.find_elements(By.CSS_SELECTOR, "#collection option")) > 1
        )
        assert not browser.find_element(By.ID, "documents").is_displayed()
        browser.execute_script(f"localStorage.setItem('ragloop-key', '{KEYS['root']}')")
        browser.refresh()
        wait(browser).until(ready.visibility_of_element_located((By.ID, "documents")))
        browser.execute_script("localStorage.clear()")

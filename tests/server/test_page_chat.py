"""The page as a chat, in headless Chromium (issue 60, item 1): a follow-up is answered in the
thread, read with the conversation; answers are rendered as people read them (a code span in
<code>, code blocks in a monospace font with a copy button, lists, links); an LLM's answer
arrives token by token; confident, not sure and error each wear their own colour."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("selenium.webdriver", reason="the page tests need selenium")

from selenium.webdriver.common.by import By

from ragloop import Document, KnowledgeBase
from ragloop.config import Settings
from ragloop.providers import override_allow_model_requests
from tests.providers.server import ChatServer
from tests.server import test_page
from tests.server.conftest import build_kb, key_settings, serving

browser = test_page.browser
pytestmark = test_page.pytestmark
ask, settled, wait = test_page.ask, test_page.settled, test_page.wait

OK, WARN, BAD = "rgb(21, 128, 61)", "rgb(180, 83, 9)", "rgb(185, 28, 28)"  # --ok, --warn, --bad
MONOSPACE = ("monospace", "Menlo", "Consolas", "Liberation Mono")


@pytest.fixture(scope="module")
def kb_path(tmp_path_factory):
    path = build_kb(tmp_path_factory.mktemp("page-chat") / "kb.sqlite")
    with KnowledgeBase(path, embedder="hash") as kb:
        kb.add_documents(
            [
                Document(
                    source="dedent.md",
                    title="Removing indentation",
                    text="Use `textwrap.dedent()` to remove common leading whitespace from "
                    "every line of a string.",
                )
            ],
            collection="public",
        )
    return path


def style(browser, element, name: str) -> str:
    return str(browser.execute_script(f"return getComputedStyle(arguments[0]).{name}", element))


def edge(browser, turn) -> str:
    return style(browser, turn.find_element(By.CSS_SELECTOR, ".answer"), "borderLeftColor")


def test_a_code_span_is_rendered_in_code_in_a_monospace_font(browser, kb_path, tmp_path):
    with serving(kb_path, Settings(), tmp_path) as (url, _):
        turn = ask(browser, url, "How do I remove common leading whitespace from every line?")
        text = turn.find_element(By.CSS_SELECTOR, ".answer-text")
        assert "`" not in text.text  # no backticks shown raw
        code = text.find_element(By.CSS_SELECTOR, "code")
        assert code.text == "textwrap.dedent()"
        assert any(name in style(browser, code, "fontFamily") for name in MONOSPACE)
        assert "dedent.md" in turn.find_element(By.CSS_SELECTOR, ".sources").text


def test_a_follow_up_is_answered_in_the_thread(browser, kb_path, tmp_path):
    with serving(kb_path, Settings(), tmp_path) as (url, service):
        first = ask(browser, url, "What is the Skylark 2?")
        assert "two-person tent" in first.find_element(By.CSS_SELECTOR, ".answer-text").text
        second = ask(browser, url, "How much does it weigh?", follow_up=True)
        thread = test_page.turns(browser)
        assert len(thread) == 2  # one conversation, both turns shown
        assert "two-person tent" in thread[0].find_element(By.CSS_SELECTOR, ".answer-text").text
        assert second.find_element(By.CSS_SELECTOR, ".asked-text").text == "How much does it weigh?"
        read_as = second.find_element(By.CSS_SELECTOR, ".read-as").text
        assert read_as == "read as: How much does the Skylark 2 weigh?"
        assert "2.1 kg" in second.find_element(By.CSS_SELECTOR, ".answer-text").text
        run = second.find_element(By.CSS_SELECTOR, ".trace-link").get_attribute("data-run-id")
        assert service.traces.get(run).meta["followup"] == "How much does it weigh?"
        browser.find_element(By.ID, "new-conversation").click()
        assert test_page.turns(browser) == []
        fresh = ask(browser, url, "How much does it weigh?", follow_up=True)  # nothing to read
        assert not fresh.find_element(By.CSS_SELECTOR, ".read-as").is_displayed()


def test_each_state_wears_its_own_colour(browser, kb_path, tmp_path):
    with serving(kb_path, key_settings(), tmp_path) as (url, _):
        browser.get(url + "/")
        browser.execute_script("localStorage.clear()")
        refused = ask(browser, url, "How much does the Skylark 2 weigh?")  # no key: a 401
        assert refused.get_attribute("data-state") == "error"
        assert edge(browser, refused) == BAD
        assert refused.find_element(By.CSS_SELECTOR, ".badge").text == "error"
        problem = refused.find_element(By.CSS_SELECTOR, ".problem")
        assert problem.text.startswith("401: ")
        assert style(browser, problem, "color") == BAD
        browser.execute_script(f"localStorage.setItem('ragloop-key', '{test_page.KEYS['root']}')")
        sure = ask(browser, url, "How much does the Skylark 2 weigh?")
        assert sure.get_attribute("data-state") == "confident"
        assert edge(browser, sure) == OK
        assert sure.find_element(By.CSS_SELECTOR, ".badge").text == "confident"
        unsure = ask(browser, url, "What does a helicopter rescue cost on Mars?", follow_up=True)
        assert unsure.get_attribute("data-state") == "unsure"
        assert edge(browser, unsure) == WARN
        assert unsure.find_element(By.CSS_SELECTOR, ".badge").text == "not sure"
        gaps = unsure.find_element(By.CSS_SELECTOR, ".gaps")
        assert gaps.text.startswith("What was found and what was not:")
        assert "null" not in gaps.text.split()  # a part of the report it lacks is left out
        shown = unsure.find_element(By.CSS_SELECTOR, ".answer-text")
        assert shown.text.startswith("No sure answer was found in the documents.")
        assert shown.find_elements(By.CSS_SELECTOR, "ol > li")  # the closest passages
        browser.save_screenshot("/tmp/page-states.png")
        browser.execute_script("localStorage.clear()")


# -- an LLM writes the answer: it arrives token by token -----------------------------------------

ANSWER = """Use `textwrap.dedent()` [1]:

```python
import textwrap
print(textwrap.dedent(text))
```

- it removes the common leading whitespace
- lines of only whitespace become empty

See [the textwrap docs](https://docs.python.org/3/library/textwrap.html)."""
VERDICT = {"is_grounded": True, "is_complete": True, "score": 0.95, "reason": "it says so"}


def writing_model() -> ChatServer:
    """A chat model on 127.0.0.1: the answer (the one request that streams) comes as the
    generator's JSON in small pieces and stops halfway until ``resume`` is set; any other
    request (the judge's) gets a verdict."""
    answer = json.dumps({"answer": ANSWER, "confidence": 0.9})
    return ChatServer(json.dumps(VERDICT), streamed=answer, piece_chars=6, pause_halfway=True)


def test_an_llm_answer_arrives_token_by_token_and_is_rendered_as_markdown(
    browser, kb_path, tmp_path
):
    with (
        writing_model() as model,
        override_allow_model_requests("loopback"),
        serving(kb_path, Settings.model_validate({"model": {"spec": model.spec}}), tmp_path) as (
            url,
            _,
        ),
    ):
        browser.get(url + "/")
        box = browser.find_element(By.ID, "question")
        box.send_keys("How do I remove common leading whitespace?")
        browser.find_element(By.ID, "ask").click()
        assert model.halfway.wait(60), "the answer was never asked for"
        text = wait(browser).until(
            lambda b: b.find_element(By.CSS_SELECTOR, "#thread .turn .answer-text.writing")
        )
        wait(browser).until(lambda b: "Use `textwrap" in text.text)  # the first pieces, raw
        written = text.text
        assert "docs python org" not in written
        assert "textwrap docs" not in written  # half of it: the rest is still to come
        turn = test_page.turns(browser)[0]
        assert turn.get_attribute("data-state") == "working"
        model.resume.set()
        turn = settled(browser, 1)
        assert turn.get_attribute("data-state") == "confident"
        rendered = turn.find_element(By.CSS_SELECTOR, ".answer-text")
        assert "writing" not in rendered.get_attribute("class")
        assert rendered.find_element(By.CSS_SELECTOR, "p code").text == "textwrap.dedent()"
        block = rendered.find_element(By.CSS_SELECTOR, ".code pre code")
        assert block.text == "import textwrap\nprint(textwrap.dedent(text))"
        assert any(name in style(browser, block, "fontFamily") for name in MONOSPACE)
        assert rendered.find_element(By.CSS_SELECTOR, ".code button.copy").text == "copy"
        items = [li.text for li in rendered.find_elements(By.CSS_SELECTOR, "ul > li")]
        assert items == [
            "it removes the common leading whitespace",
            "lines of only whitespace become empty",
        ]
        link = rendered.find_element(By.CSS_SELECTOR, "a[href^='https://']")
        assert link.text == "the textwrap docs"
        assert link.get_attribute("href") == "https://docs.python.org/3/library/textwrap.html"
        assert rendered.find_element(By.CSS_SELECTOR, "a.cite").text == "[1]"
        browser.save_screenshot("/tmp/page-llm.png")

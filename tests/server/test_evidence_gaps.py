"""A served answer that is not confident says what was found and what was not: in the JSON of
/v1/ask, in one line of the chat route's text, in the MCP ask tool, in the HTML trace and on the
page; and /v1/ask takes a target precision."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import auth

HALF = "How much does the Skylark 2 weigh, and what does a helicopter rescue cost?"


def ask(url: str, **body: object) -> dict:
    response = httpx.post(f"{url}/v1/ask", json=body, headers=auth("alice"), timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("engine", ["rag", "agent", "retrieval"])
def test_ask_reports_the_part_found_and_the_part_not_found(server, engine):
    url, _ = server
    answer = ask(url, question=HALF, engine=engine)
    assert answer["confident"] is False
    gaps = answer["gaps"]
    assert [(p["found"], p["source"]) for p in gaps["parts"]] == [
        (True, "skylark.md"),
        (False, None),
    ]
    assert "helicopter" in gaps["parts"][1]["part"]
    assert "helicopter" in gaps["missing_terms"]
    assert gaps["searches"][0] == HALF
    assert gaps["nearest"][0]["source"]
    html = httpx.get(f"{url}{answer['trace_url']}?format=html", headers=auth("alice")).text
    assert "What was found and what was not" in html
    assert "helicopter rescue cost" in html


def test_a_target_precision_asked_for_is_the_one_the_run_keeps(server):
    url, _ = server
    easy = ask(url, question="How much does the Skylark 2 weigh?")
    assert easy["confident"] is True
    assert easy["gaps"] is None
    assert easy["probability"] >= 0.5
    strict = ask(url, question="How much does the Skylark 2 weigh?", target_precision=0.99)
    assert strict["confident"] is False
    assert strict["target_precision"] == 0.99
    assert strict["gaps"]["target"] == 0.99
    assert strict["gaps"]["parts"][0]["found"] is True  # found, but not sure enough
    bad = httpx.post(
        f"{url}/v1/ask", json={"question": "q", "target_precision": 2}, headers=auth("alice")
    )
    assert bad.status_code == 422


def test_the_chat_route_answers_an_unsure_run_with_its_evidence_first(server):
    url, _ = server
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "rag", "messages": [{"role": "user", "content": HALF}]},
        headers=auth("alice"),
        timeout=120,
    )
    assert response.status_code == 200, response.text
    data = response.json()
    text = data["choices"][0]["message"]["content"]
    lines = text.splitlines()
    assert lines[0] == "No sure answer was found in the documents."
    assert lines[1].startswith("Found: 'How much does the Skylark 2 weigh' (in skylark.md)")
    assert "not found: 'what does a helicopter rescue cost'" in lines[1]
    assert "The closest passages, best first:" in lines
    assert lines[lines.index("The closest passages, best first:") + 1].startswith("1. ")
    assert "(skylark.md, Skylark 2)" in text  # each passage with its source and section
    assert data["ragloop"]["confident"] is False
    assert data["ragloop"]["gaps"]["parts"][1]["found"] is False

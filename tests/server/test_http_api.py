"""The HTTP API with real clients (httpx) against uvicorn on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from ragloop import LoopConfig, RAGLoop
from tests.helpers import EchoGenerator, ListReformulator, ScoreEvaluator, SlowAsyncRetriever
from tests.server.conftest import auth, engine_key, key_settings, serving


def sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_health_and_openapi_need_no_key(server):
    url, _ = server
    health = httpx.get(f"{url}/healthz").json()
    assert health["status"] == "ok"
    assert health["auth"] is True
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    for path in ("/v1/search", "/v1/ask", "/v1/retrieve", "/v1/chat/completions"):
        assert path in paths
    assert "/v1/traces/{trace_id}" in paths


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), ({"Authorization": "Bearer rl-nope"}, 401), ({"X-API-Key": "rl-alice-key"}, 200)],
)
def test_a_key_is_required_and_checked(server, headers, status):
    url, _ = server
    response = httpx.post(f"{url}/v1/search", json={"query": "tent"}, headers=headers)
    assert response.status_code == status, response.text


def test_a_key_searches_its_collections_only(server):
    url, _ = server
    public = httpx.post(
        f"{url}/v1/search", json={"query": "tent weighs", "top_k": 10}, headers=auth("alice")
    ).json()["chunks"]
    secret = httpx.post(
        f"{url}/v1/search", json={"query": "tent weighs", "top_k": 10}, headers=auth("bob")
    ).json()["chunks"]
    assert public
    assert {c["collection"] for c in public} == {"public"}
    assert secret
    assert {c["collection"] for c in secret} == {"secret"}
    asked = httpx.post(
        f"{url}/v1/search",
        json={"query": "tent", "collection": "secret"},
        headers=auth("alice"),
    )
    assert asked.status_code == 403
    assert "secret" in asked.json()["detail"]
    both = httpx.post(
        f"{url}/v1/search", json={"query": "tent weighs", "top_k": 10}, headers=auth("root")
    ).json()["chunks"]
    assert {c["collection"] for c in both} == {"public", "secret"}


@pytest.mark.parametrize("engine", ["rag", "agent", "retrieval"])
def test_ask_answers_with_citations_and_a_trace_only_its_key_reads(server, engine):
    url, _ = server
    response = httpx.post(
        f"{url}/v1/ask",
        json={"question": "How much does the Skylark 2 weigh?", "engine": engine},
        headers=auth("alice"),
        timeout=60,
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["engine"] == engine
    assert "2.1 kg" in answer["answer"]
    assert answer["citations"]
    assert answer["citations"][0]["source"] == "skylark.md"
    assert answer["citations"][0]["chunk_id"]
    assert {c["collection"] for c in answer["chunks"]} <= {"public"}
    trace = httpx.get(f"{url}{answer['trace_url']}", headers=auth("alice"))
    assert trace.status_code == 200
    assert trace.json()["id"] == answer["run_id"]
    assert trace.json()["meta"]["key"] == "alice"
    assert httpx.get(f"{url}{answer['trace_url']}", headers=auth("bob")).status_code == 404
    html = httpx.get(f"{url}{answer['trace_url']}?format=html", headers=auth("root"))
    assert html.headers["content-type"].startswith("text/html")
    assert "Skylark" in html.text
    chunk_id = answer["citations"][0]["chunk_id"]
    chunk = httpx.get(f"{url}/v1/chunks/{chunk_id}", headers=auth("alice")).json()
    assert "2.1 kg" in chunk["text"]
    assert httpx.get(f"{url}/v1/chunks/{chunk_id}", headers=auth("bob")).status_code == 404


def test_ask_streams_every_event_then_the_result(server):
    url, _ = server
    with httpx.stream(
        "POST",
        f"{url}/v1/ask",
        json={"question": "How much does it cost to hire a tent for a weekend?"},
        headers={**auth("alice"), "Accept": "text/event-stream"},
        timeout=60,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response.read().decode())
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "result"
    assert "search" in kinds
    assert "evaluation" in kinds
    assert "run_finished" in kinds
    root = events[0][1]["run_id"]
    search = next(data for kind, data in events if kind == "search" and data["run_id"] == root)
    assert search["attributes"]["query"]
    assert all(
        c["source"] in ("hire.md", "skylark.md", "returns.md")
        for kind, data in events
        if kind == "search"
        for c in data["attributes"]["chunks"]
    )
    result = events[-1][1]
    assert "30 pounds" in result["answer"]
    assert result["run_id"] == root


def test_retrieve_returns_the_evidence_of_the_retrieval_loop(server):
    url, _ = server
    response = httpx.post(
        f"{url}/v1/retrieve",
        json={"question": "What does the Skylark 2 weigh?", "top_k": 3},
        headers=auth("alice"),
        timeout=60,
    )
    evidence = response.json()
    assert response.status_code == 200, response.text
    assert evidence["chunks"][0]["source"] == "skylark.md"
    assert len(evidence["chunks"]) <= 3
    assert evidence["stop_reason"]


def test_limits_on_body_question_and_concurrency(kb_file, tmp_path):
    settings = key_settings(max_body_bytes=2000, max_question_chars=100)
    with serving(kb_file, settings, tmp_path) as (url, service):
        big = httpx.post(f"{url}/v1/search", json={"query": "x" * 5000}, headers=auth("alice"))
        assert big.status_code == 413
        long = httpx.post(f"{url}/v1/ask", json={"question": "y" * 200}, headers=auth("alice"))
        assert long.status_code == 413
        assert "100 characters" in long.json()["detail"]
        # a key limited to one run at a time: a second one is refused while the first runs
        slow = RAGLoop(
            SlowAsyncRetriever(delay=1.0),
            EchoGenerator(),
            ScoreEvaluator([1.0]),
            ListReformulator([["x"]]),
            LoopConfig(max_iterations=1),
        )
        service._engines[engine_key(service, "rag")] = slow

        async def two_at_once() -> list[int]:
            async with httpx.AsyncClient(base_url=url, headers=auth("one"), timeout=30) as client:
                first = asyncio.create_task(client.post("/v1/ask", json={"question": "q"}))
                await asyncio.sleep(0.3)
                second = await client.post("/v1/ask", json={"question": "q"})
                return [(await first).status_code, second.status_code]

        assert asyncio.run(two_at_once()) == [200, 429]


def test_a_client_that_disconnects_cancels_its_run_and_its_trace_is_stored(server):
    url, service = server
    service._engines[engine_key(service, "rag")] = RAGLoop(
        SlowAsyncRetriever(delay=30.0),
        EchoGenerator(),
        ScoreEvaluator([1.0]),
        ListReformulator([["x"]]),
    )
    with httpx.stream(
        "POST",
        f"{url}/v1/ask",
        json={"question": "never answered", "stream": True},
        headers=auth("root"),
        timeout=30,
    ) as response:
        first = next(response.iter_lines())
        assert first == "event: run_started"
    # the connection is closed: the server cancels the run and stores it
    for _ in range(100):
        stored = service.traces.list()
        if stored and stored[0].question == "never answered":
            break
        import time

        time.sleep(0.05)
    assert stored[0].stop_reason == "cancelled"


def test_the_deadline_stops_a_run_and_one_without_an_answer_is_a_504(kb_file, tmp_path):
    with serving(kb_file, key_settings(deadline_s=0.5), tmp_path) as (url, service):
        service._engines[engine_key(service, "rag")] = RAGLoop(
            SlowAsyncRetriever(delay=30.0),
            EchoGenerator(),
            ScoreEvaluator([1.0]),
            ListReformulator([["x"]]),
        )
        answer = httpx.post(
            f"{url}/v1/ask", json={"question": "slow"}, headers=auth("root"), timeout=30
        )
        assert answer.status_code == 504, answer.text
        assert "deadline" in answer.json()["detail"]
        (stored,) = service.traces.list()
        assert stored.stop_reason == "budget_wall_ms"  # stopped by its budget, not cancelled


def test_admin_keys_add_and_delete_documents(server):
    url, _ = server
    doc = {"source": "stoves.md", "text": "The Ember stove boils a litre in four minutes."}
    refused = httpx.post(
        f"{url}/v1/documents",
        json={"documents": [doc], "collection": "public"},
        headers=auth("alice"),
    )
    assert refused.status_code == 403
    added = httpx.post(
        f"{url}/v1/documents",
        json={"documents": [doc], "collection": "public"},
        headers=auth("root"),
    )
    assert added.json()["added"] == 1
    found = httpx.post(
        f"{url}/v1/search", json={"query": "Ember stove litre"}, headers=auth("alice")
    ).json()["chunks"]
    assert found[0]["source"] == "stoves.md"
    upload = httpx.post(
        f"{url}/v1/documents/files",
        files={
            "files": ("lamps.md", b"# Lamps\n\nThe Glow lamp runs for 40 hours.", "text/markdown")
        },
        data={"collection": "public"},
        headers=auth("root"),
    )
    assert upload.json()["added"] == 1, upload.text
    glow = httpx.post(
        f"{url}/v1/search", json={"query": "Glow lamp hours"}, headers=auth("alice")
    ).json()["chunks"]
    assert glow[0]["source"] == "lamps.md"
    for source in ("stoves.md", "lamps.md"):
        gone = httpx.delete(f"{url}/v1/documents", params={"source": source}, headers=auth("root"))
        assert gone.json() == {"removed": 1}
    again = httpx.post(
        f"{url}/v1/search", json={"query": "Ember stove litre"}, headers=auth("alice")
    ).json()["chunks"]
    assert all(c["source"] != "stoves.md" for c in again)


def test_collections_lists_what_the_key_may_read(server):
    url, _ = server
    names = [c["name"] for c in httpx.get(f"{url}/v1/collections", headers=auth("alice")).json()]
    assert names == ["public"]


def test_a_key_never_sees_another_collection_under_concurrency(server):
    url, _ = server
    questions = ["How much does a tent weigh?", "What does tent hire cost?"] * 6

    async def ask(client: httpx.AsyncClient, who: str, question: str) -> tuple[str, dict]:
        response = await client.post(
            "/v1/ask", json={"question": question}, headers=auth(who), timeout=120
        )
        assert response.status_code == 200, response.text
        return who, response.json()

    async def main() -> list[tuple[str, dict]]:
        async with httpx.AsyncClient(base_url=url) as client:
            return await asyncio.gather(
                *(ask(client, who, q) for q in questions for who in ("alice", "bob"))
            )

    expected = {
        "alice": {"hire.md", "skylark.md", "returns.md"},
        "bob": {"launch.md", "margins.md"},
    }
    for who, answer in asyncio.run(main()):
        sources = {c["source"] for c in answer["chunks"]} | {
            c["source"] for c in answer["citations"]
        }
        assert sources, who
        assert sources <= expected[who], (who, sources)

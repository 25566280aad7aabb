"""Text that is not Unicode (a lone surrogate, ``"\\ud800"``: valid JSON) is a 422 with a message
on every JSON route, never a 500; a stream that fails after its 200 ends with ``event: error``;
and no JSON body hypothesis makes up gets a 5xx. Against uvicorn on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragloop import GeneratorOutput, LoopConfig, RAGLoop
from ragloop.config import Settings
from tests.helpers import ListReformulator, ScoreEvaluator, chunk
from tests.server.conftest import auth, build_kb, engine_key, key_settings, serving
from tests.server.test_http_api import sse_events

LONE = "\ud800"
ROUTES: dict[str, dict[str, Any]] = {
    "/v1/search": {"query": "tent"},
    "/v1/ask": {"question": "What does a tent cost?"},
    "/v1/retrieve": {"question": "What does a tent cost?"},
    "/v1/chat/completions": {
        "model": "ragloop",
        "messages": [{"role": "user", "content": "What does a tent cost?"}],
    },
    "/v1/documents": {"documents": [{"source": "a.md", "text": "A lamp."}], "collection": "c"},
}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, Any]]:
    folder = tmp_path_factory.mktemp("bad-text")
    kb = build_kb(folder / "kb.sqlite")
    with serving(kb, key_settings(), folder) as running:
        yield running


def post(url: str, path: str, body: Any, **extra: str) -> httpx.Response:
    # json.dumps escapes a lone surrogate as \ud800: the body is valid JSON, as a client sends it
    return httpx.post(
        f"{url}{path}",
        content=json.dumps(body),
        headers={**auth("root"), "Content-Type": "application/json", **extra},
        timeout=120,
    )


def with_lone_surrogates(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The body with each of its strings in turn made a lone surrogate (and one key)."""
    yield {**body, LONE: "x"}
    for key, value in body.items():
        if isinstance(value, str):
            yield {**body, key: value + LONE}
    if "messages" in body:
        yield {**body, "messages": [{"role": "user", "content": LONE}]}
        yield {**body, "messages": [{"role": "user", "content": [{"type": "text", "text": LONE}]}]}
    if "documents" in body:
        for field in ("source", "text", "title"):
            yield {**body, "documents": [{**body["documents"][0], field: LONE}]}


@pytest.mark.parametrize("path", list(ROUTES))
def test_a_lone_surrogate_is_a_422_naming_the_field(served, path):
    url, _ = served
    # the OpenAI route answers a body that does not validate as OpenAI does: 400
    expected = 400 if path == "/v1/chat/completions" else 422
    for body in with_lone_surrogates(ROUTES[path]):
        for stream in (False, True) if path != "/v1/documents" else (False,):
            response = post(url, path, {**body, "stream": True} if stream else body)
            assert response.status_code == expected, (body, response.text)
            message = json.dumps(response.json())
            assert "lone surrogate" in message, message


def test_a_stream_that_fails_after_its_200_ends_with_an_error_event(served):
    url, service = served

    class Retriever:
        async def aretrieve(self, query: str, top_k: int = 5) -> list[Any]:
            return [chunk("The Skylark 2 weighs 2.1 kg.", 0.5, source="skylark.md")]

    class BrokenText:
        """A generator whose answer is not Unicode: the stream cannot send its answer event."""

        def generate(self, query: str, chunks: list[Any]) -> GeneratorOutput:
            return GeneratorOutput(answer=f"2.1 kg {LONE}", confidence=0.5)

    service._engines[engine_key(service, "rag")] = RAGLoop(
        Retriever(),
        BrokenText(),
        ScoreEvaluator([1.0]),
        ListReformulator([["x"]]),
        LoopConfig(max_iterations=1),
    )
    try:
        with httpx.stream(
            "POST",
            f"{url}/v1/ask",
            json={"question": "odd text", "stream": True, "engine": "rag"},
            headers=auth("root"),
            timeout=60,
        ) as response:
            assert response.status_code == 200
            events = sse_events(response.read().decode())
    finally:
        del service._engines[engine_key(service, "rag")]
    assert [kind for kind, _ in events][:2] == ["run_started", "search"]
    kind, data = events[-1]
    assert kind == "error"
    assert "surrogate" in data["detail"]


# -- fuzz: whatever JSON comes, the answer is never a 5xx -----------------------------------

nasty_text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=20),  # surrogates included
    st.sampled_from(["", " ", LONE, "\udfff", "a\x00b", "\u202e", "x" * 5000, "🏕️"]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | nasty_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(nasty_text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, Any]:
    path = draw(st.sampled_from(list(ROUTES)))
    base = ROUTES[path]
    if draw(st.booleans()):
        return path, draw(json_values)  # anything at all
    body = {key: draw(st.one_of(st.just(value), json_values)) for key, value in base.items()}
    if draw(st.booleans()):
        body["stream"] = draw(st.one_of(st.booleans(), json_values))
    return path, body


@given(bodies())
def test_no_json_body_gets_a_5xx(served, case):
    url, _ = served
    path, body = case
    response = post(url, path, body)  # NaN and Infinity too: Python's json module sends them
    assert response.status_code < 500, (path, body, response.text)
    if response.status_code == 200 and "event-stream" in response.headers["content-type"]:
        events = sse_events(response.text) if "event:" in response.text else []
        assert not events or events[-1][0] in ("result", "error")


def test_keyless_reads_refuse_bad_text_too(kb_file, tmp_path):
    with serving(kb_file, Settings(), tmp_path) as (url, _):
        response = httpx.post(
            f"{url}/v1/search",
            content=b'{"query": "\\ud800"}',
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 422


def test_infinity_and_nan_are_422_not_500(served):
    url, _ = served
    for value in (float("inf"), float("nan")):  # Python's json module sends them
        response = post(url, "/v1/search", {"query": value})
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["body", "query"]

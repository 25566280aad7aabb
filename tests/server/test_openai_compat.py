"""The OpenAI-compatible route with the official OpenAI client against a running server."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import KEYS

openai = pytest.importorskip("openai", reason="the OpenAI client is a dev dependency")


@pytest.fixture
def client(server):
    url, _ = server
    with openai.OpenAI(base_url=f"{url}/v1", api_key=KEYS["alice"], max_retries=0) as chat:
        yield chat


def test_the_model_name_picks_the_engine_and_the_answer_keeps_its_sources(client):
    for model in ("ragloop-rag", "ragloop-agent", "ragloop-retrieval", "ragloop"):
        completion = client.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "How much does the Skylark 2 weigh?"},
            ],
        )
        answer = completion.choices[0].message.content
        assert "2.1 kg" in answer, model
        assert "Sources:" in answer
        sources = completion.model_extra["sources"]
        assert sources[0]["source"] == "skylark.md"
        assert completion.model_extra["ragloop"]["trace_url"].startswith("/v1/traces/")
        assert completion.choices[0].finish_reason == "stop"


def test_streaming_works_with_the_official_client(client):
    stream = client.chat.completions.create(
        model="ragloop-rag",
        messages=[{"role": "user", "content": "How much is tent hire for a weekend?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "30 pounds" in text
    events = [
        c.model_extra["ragloop"]["event"]["kind"]
        for c in chunks
        if c.model_extra.get("ragloop") and "event" in c.model_extra["ragloop"]
    ]
    assert events[0] == "run_started"
    assert "search" in events
    last = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert last.model_extra["sources"][0]["source"] == "hire.md"
    assert chunks[-1].usage is not None  # include_usage: a last chunk with the usage
    assert chunks[-1].choices == []


def test_models_list_the_engines_and_an_unknown_model_is_a_404(client):
    assert {m.id for m in client.models.list()} == {
        "ragloop",
        "ragloop-rag",
        "ragloop-agent",
        "ragloop-retrieval",
    }
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def test_a_wrong_key_is_refused_as_openai_clients_expect(server):
    url, _ = server
    with (
        openai.OpenAI(base_url=f"{url}/v1", api_key="rl-wrong", max_retries=0) as chat,
        pytest.raises(openai.AuthenticationError),
    ):
        chat.chat.completions.create(model="ragloop", messages=[{"role": "user", "content": "hi"}])
    assert httpx.get(f"{url}/v1/models").status_code == 401

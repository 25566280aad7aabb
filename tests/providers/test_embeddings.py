"""OpenAICompatibleEmbedder against a loopback server speaking /v1/embeddings."""

from __future__ import annotations

import pytest

from ragloop import ConfigError, Embedder, ModelError, OpenAICompatibleEmbedder, Usage
from ragloop.core.budget import BudgetTracker
from tests.providers.server import Reply


def embeddings(vectors: dict[int, list[float]], prompt_tokens: int | None = 8) -> Reply:
    """The documented list object; ``vectors`` maps index to vector, in the order sent."""
    body = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in vectors.items()],
        "model": "text-embedding-3-small",
    }
    if prompt_tokens is not None:
        body["usage"] = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return Reply(json=body)


@pytest.fixture
def embedder(server):
    made = OpenAICompatibleEmbedder(
        "nomic-embed-text", base_url=f"{server.url}/v1", dimension=2, batch_size=2
    )
    yield made
    made.close()


def test_texts_go_in_batches_and_vectors_come_back_in_order(server, embedder):
    server.reply(
        embeddings({1: [0.0, 1.0], 0: [1.0, 0.0]}),  # out of order: sorted by index
        embeddings({0: [0.5, 0.5]}),
    )
    vectors = embedder.embed(["a", "b", "c"])
    assert vectors == [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]
    assert [r.body for r in server.received] == [
        {"model": "nomic-embed-text", "input": ["a", "b"]},
        {"model": "nomic-embed-text", "input": ["c"]},
    ]
    assert server.received[0].path == "/v1/embeddings"
    assert isinstance(embedder, Embedder)
    assert (embedder.model_id, embedder.dimension, embedder.provider) == (
        "nomic-embed-text",
        2,
        "openai-compatible",
    )


async def test_aembed(server, embedder):
    server.reply(embeddings({0: [1.0, 0.0]}))
    assert await embedder.aembed(["a"]) == [[1.0, 0.0]]


def test_no_texts_no_request(server, embedder):
    assert embedder.embed([]) == []
    assert server.received == []


def test_usage_is_charged_to_the_run_with_its_cost(server):
    server.reply(embeddings({0: [0.1] * 1536}, prompt_tokens=1000))
    embedder = OpenAICompatibleEmbedder(
        "text-embedding-3-small", base_url=server.url, api_key="sk-test"
    )
    tracker = BudgetTracker()
    with tracker.active():
        embedder.embed(["hello"])
    assert tracker.usage == Usage(input_tokens=1000, cost_usd=1000 * 0.02 / 1e6)
    assert server.received[0].headers["authorization"] == "Bearer sk-test"
    assert "dimensions" not in server.received[0].body
    embedder.close()


def test_a_shorter_dimension_is_asked_of_text_embedding_3(server):
    server.reply(embeddings({0: [0.1] * 256}))
    embedder = OpenAICompatibleEmbedder(
        "text-embedding-3-large", base_url=server.url, dimension=256
    )
    assert len(embedder.embed(["x"])[0]) == 256
    assert server.received[0].body["dimensions"] == 256
    embedder.close()


def test_vectors_of_the_wrong_length_or_count_are_refused(server, embedder):
    server.reply(embeddings({0: [1.0, 0.0, 0.0]}), embeddings({0: [1.0, 0.0]}))
    with pytest.raises(ModelError, match="length 3"):
        embedder.embed(["a"])
    with pytest.raises(ModelError, match="1 embeddings for 2 texts"):
        embedder.embed(["a", "b"])


def test_a_malformed_body_is_refused(server, embedder):
    server.reply(Reply(json={"data": "nope"}))
    with pytest.raises(ModelError, match="returned no embeddings"):
        embedder.embed(["a"])


def test_an_unknown_models_dimension_must_be_given():
    with pytest.raises(ConfigError, match="dimension"):
        OpenAICompatibleEmbedder("nomic-embed-text", base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="batch_size"):
        OpenAICompatibleEmbedder(batch_size=0)

"""Fakes for testing loops without a network or an LLM: public, so users test their loops too.

- :class:`ScriptedModel`: a chat model that replays a queue of replies and records every call.
- :class:`FunctionModel`: a chat model whose every reply is computed by a function you give.
- :class:`HashEmbedder`: a deterministic embedder (feature hashing of words and trigrams).
- :class:`InMemoryRetriever`: BM25 over a handful of texts, scores in [0, 1].

Example::

    from ragloop import ModelResponse, ToolCall
    from ragloop.testing import ScriptedModel

    model = ScriptedModel([
        '{"is_grounded": true, "is_complete": true, "score": 0.9, "reason": "ok"}',
        ModelResponse(tool_calls=[ToolCall(name="search", arguments={"query": "x"})]),
        TimeoutError("the provider timed out"),        # raised on the third call
        lambda messages: f"echo: {messages[-1].content}",
    ])

- :mod:`ragloop.testing.conformance`: the conformance suite every knowledge-base store passes
  (needs pytest);
- :mod:`ragloop.testing.postgres`: a throw-away PostgreSQL server with pgvector
  (:class:`~ragloop.testing.postgres.TemporaryPostgres`).
"""

from ragloop.kb.embedding.hash_embedder import HashEmbedder as HashEmbedder
from ragloop.testing.fakes import FunctionModel as FunctionModel
from ragloop.testing.fakes import InMemoryRetriever as InMemoryRetriever
from ragloop.testing.fakes import ModelCall as ModelCall
from ragloop.testing.fakes import ScriptedModel as ScriptedModel

"""The bottom floor: records, protocols, budgets, errors, tolerant JSON, sync/async calls.

Nothing here imports from the rest of ragloop.

- ``records/``: the records every layer passes (``Chunk``, ``Message``, ``StopReason``,
  ``Scope``, ...) and each engine's (``rag``, ``agent``, ``retrieval``);
- ``protocols.py``: the seams users implement; ``errors.py``: the whole error tree;
- ``budget.py``, ``limits.py``: budgets and the bounds on model calls; ``calls.py``: sync and
  async components called alike; ``jsonparse.py``: model output parsed tolerantly;
- ``text.py``: tokens, stems, stopwords, sentences; ``redaction.py``: secrets kept out of logs;
- ``files.py``: local locations and SQLite's WAL; ``imports.py``: package faces, old paths.
"""

from ragloop.core.imports import keep_old_paths, lazy_face

keep_old_paths(
    __name__,
    {
        "rag_records": "ragloop.core.records.rag",
        "agent_records": "ragloop.core.records.agent",
        "retrieval_records": "ragloop.core.records.retrieval",
        "locations": "ragloop.core.files",
        "sqlite_wal": "ragloop.core.files",
    },
)

_FACE = lazy_face(
    __name__,
    {
        "ragloop.core.records.agent": (
            "AgentResult",
            "GroundedSpan",
            "Grounding",
            "SpanSource",
            "ToolHistoryEntry",
        ),
        "ragloop.core.budget": ("Budget", "BudgetSpend", "record_usage"),
        "ragloop.core.calls": ("as_async_generate_fn", "as_generate_fn"),
        "ragloop.core.errors": (
            "BudgetExceeded",
            "ComponentError",
            "ConfigError",
            "ContextOverflowError",
            "DenseSearchUnavailable",
            "EmbedderUnavailable",
            "EmptyTraceError",
            "GroundingError",
            "KnowledgeBaseNotFound",
            "ModelError",
            "ModelHTTPError",
            "ModelTimeout",
            "RagloopError",
            "RetrievalLoopError",
            "ScriptExhausted",
            "StoreError",
            "TraceCorrupted",
            "TraceNotFound",
        ),
        "ragloop.core.jsonparse": ("Parsed", "ParseFailure", "parse_llm_json"),
        "ragloop.core.protocols": (
            "ChatModel",
            "CostEstimator",
            "Embedder",
            "EmbeddingCache",
            "Evaluator",
            "Generator",
            "Grounder",
            "QueryRefiner",
            "QueryUnderstander",
            "Reformulator",
            "Retriever",
            "Router",
            "UnderstoodQueryLike",
        ),
        "ragloop.core.records.rag": (
            "EvaluationResult",
            "GeneratorOutput",
            "LoopIteration",
            "LoopResult",
            "ReformulationOutput",
            "ReformulationStrategy",
        ),
        "ragloop.core.records": (
            "Chunk",
            "Message",
            "ModelResponse",
            "StopReason",
            "Tool",
            "ToolCall",
            "Usage",
        ),
        "ragloop.core.records.retrieval": (
            "CacheStats",
            "QueryShape",
            "RefineContext",
            "RetrievalIteration",
            "RetrievalResult",
            "RouteDecision",
            "UnderstoodQuery",
        ),
    },
)
__all__ = _FACE.names


def __getattr__(name: str) -> object:
    return _FACE.resolve(name)


def __dir__() -> list[str]:
    return _FACE.dir()

"""ragloop: loop engineering for RAG.

Retrieval loops that notice when the evidence misses, try again, and record every step.
See README.md for the quick start; the public API is exactly ``__all__``.

``import ragloop`` loads none of it: each name is imported from its module the first time it is
used (PEP 562), so a script or the command line starts in a few milliseconds and only pays for
what it uses (numpy, onnxruntime, httpx, psycopg, rich load where they are needed). Type
checkers and editors read the imports under ``TYPE_CHECKING`` below, which name the same
modules as ``_EXPORTS`` (tests/test_exported_members.py keeps the two and ``__all__`` equal).
"""

import importlib as _importlib
import typing as _typing

# where each public name lives, by module
_EXPORTS: dict[str, tuple[str, ...]] = {
    "ragloop.components.controller": ("OfflineController",),
    "ragloop.components.corpus": ("Corpus",),
    "ragloop.components.cost": ("DefaultCostEstimator",),
    "ragloop.components.evaluators": ("HeuristicEvaluator", "LLMEvaluator"),
    "ragloop.components.generators": ("ExtractiveGenerator", "LLMGenerator"),
    "ragloop.components.grounding": ("LexicalGrounder", "LLMJudgeGrounder"),
    "ragloop.components.refiners": (
        "EntityBridgeRefiner",
        "KeywordRefiner",
        "PseudoRelevanceRefiner",
        "RefinerChain",
    ),
    "ragloop.components.reformulators": ("HeuristicReformulator", "LLMReformulator"),
    "ragloop.components.understanding": ("HeuristicUnderstander", "LLMUnderstander"),
    "ragloop.core.agent_records": (
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
    "ragloop.core.rag_records": (
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
    "ragloop.core.retrieval_records": (
        "CacheStats",
        "QueryShape",
        "RefineContext",
        "RetrievalIteration",
        "RetrievalResult",
        "RouteDecision",
        "UnderstoodQuery",
    ),
    "ragloop.engines.agent": ("AgentLoop",),
    "ragloop.engines.grounding": ("aground", "ground"),
    "ragloop.engines.options": ("LoopConfig", "RetrievalLoopConfig"),
    "ragloop.engines.rag": ("RAGLoop",),
    "ragloop.engines.retrieval": ("RetrievalLoop",),
    "ragloop.observability": ("EventKind", "LoopEvent", "listen", "set_trace_content"),
    "ragloop.observability.traces": ("TraceRecord", "TraceRecorder", "TraceStore"),
    "ragloop.providers": (
        "AnthropicModel",
        "OpenAICompatibleEmbedder",
        "OpenAICompatibleModel",
        "get_model",
        "resolve_model",
    ),
    "ragloop.retrieval.chunking": ("ChunkingConfig",),
    "ragloop.retrieval.embedders": (
        "E5Embedder",
        "MiniLMEmbedder",
        "get_embedder",
    ),
    "ragloop.retrieval.embedding_cache": ("ExactEmbeddingCache", "SemanticEmbeddingCache"),
    "ragloop.retrieval.ingest": ("IngestInterrupted", "IngestProgress", "IngestReport"),
    "ragloop.retrieval.knowledge_base": ("Document", "KnowledgeBase", "KnowledgeBaseRetriever"),
    "ragloop.retrieval.routing": ("RetrievalRouter",),
    "ragloop.retrieval.store": ("Store",),
    "ragloop.retrieval.store_postgres": ("PostgresKnowledgeBase", "PostgresStore"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
# the subpackages, reachable as attributes after a bare ``import ragloop`` as they always were
_SUBPACKAGES = frozenset(
    {
        "cli",
        "components",
        "core",
        "demo",
        "engines",
        "evaluation",
        "observability",
        "offline",
        "offline_retrieval",
        "providers",
        "retrieval",
        "testing",
    }
)


def __getattr__(name: str) -> object:
    if name == "__version__":
        import importlib.metadata

        try:
            value: object = importlib.metadata.version("ragloop")
        except importlib.metadata.PackageNotFoundError:  # a source tree never installed
            value = "unknown"
    elif name in _MODULE_OF:
        value = getattr(_importlib.import_module(_MODULE_OF[name]), name)
    elif name in _SUBPACKAGES:
        return _importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later uses are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if _typing.TYPE_CHECKING:
    from ragloop.components.controller import OfflineController
    from ragloop.components.corpus import Corpus
    from ragloop.components.cost import DefaultCostEstimator
    from ragloop.components.evaluators import (
        HeuristicEvaluator,
        LLMEvaluator,
    )
    from ragloop.components.generators import (
        ExtractiveGenerator,
        LLMGenerator,
    )
    from ragloop.components.grounding import (
        LexicalGrounder,
        LLMJudgeGrounder,
    )
    from ragloop.components.refiners import (
        EntityBridgeRefiner,
        KeywordRefiner,
        PseudoRelevanceRefiner,
        RefinerChain,
    )
    from ragloop.components.reformulators import (
        HeuristicReformulator,
        LLMReformulator,
    )
    from ragloop.components.understanding import (
        HeuristicUnderstander,
        LLMUnderstander,
    )
    from ragloop.core.agent_records import (
        AgentResult,
        GroundedSpan,
        Grounding,
        SpanSource,
        ToolHistoryEntry,
    )
    from ragloop.core.budget import (
        Budget,
        BudgetSpend,
        record_usage,
    )
    from ragloop.core.calls import (
        as_async_generate_fn,
        as_generate_fn,
    )
    from ragloop.core.errors import (
        BudgetExceeded,
        ComponentError,
        ConfigError,
        ContextOverflowError,
        DenseSearchUnavailable,
        EmbedderUnavailable,
        EmptyTraceError,
        GroundingError,
        KnowledgeBaseNotFound,
        ModelError,
        ModelHTTPError,
        ModelTimeout,
        RagloopError,
        RetrievalLoopError,
        ScriptExhausted,
        StoreError,
        TraceCorrupted,
        TraceNotFound,
    )
    from ragloop.core.jsonparse import (
        Parsed,
        ParseFailure,
        parse_llm_json,
    )
    from ragloop.core.protocols import (
        ChatModel,
        CostEstimator,
        Embedder,
        EmbeddingCache,
        Evaluator,
        Generator,
        Grounder,
        QueryRefiner,
        QueryUnderstander,
        Reformulator,
        Retriever,
        Router,
        UnderstoodQueryLike,
    )
    from ragloop.core.rag_records import (
        EvaluationResult,
        GeneratorOutput,
        LoopIteration,
        LoopResult,
        ReformulationOutput,
        ReformulationStrategy,
    )
    from ragloop.core.records import (
        Chunk,
        Message,
        ModelResponse,
        StopReason,
        Tool,
        ToolCall,
        Usage,
    )
    from ragloop.core.retrieval_records import (
        CacheStats,
        QueryShape,
        RefineContext,
        RetrievalIteration,
        RetrievalResult,
        RouteDecision,
        UnderstoodQuery,
    )
    from ragloop.engines.agent import AgentLoop
    from ragloop.engines.grounding import (
        aground,
        ground,
    )
    from ragloop.engines.options import (
        LoopConfig,
        RetrievalLoopConfig,
    )
    from ragloop.engines.rag import RAGLoop
    from ragloop.engines.retrieval import RetrievalLoop
    from ragloop.observability import (
        EventKind,
        LoopEvent,
        listen,
        set_trace_content,
    )
    from ragloop.observability.traces import (
        TraceRecord,
        TraceRecorder,
        TraceStore,
    )
    from ragloop.providers import (
        AnthropicModel,
        OpenAICompatibleEmbedder,
        OpenAICompatibleModel,
        get_model,
        resolve_model,
    )
    from ragloop.retrieval.chunking import ChunkingConfig
    from ragloop.retrieval.embedders import E5Embedder, MiniLMEmbedder, get_embedder
    from ragloop.retrieval.embedding_cache import (
        ExactEmbeddingCache,
        SemanticEmbeddingCache,
    )
    from ragloop.retrieval.ingest import (
        IngestInterrupted,
        IngestProgress,
        IngestReport,
    )
    from ragloop.retrieval.knowledge_base import Document, KnowledgeBase, KnowledgeBaseRetriever
    from ragloop.retrieval.routing import RetrievalRouter
    from ragloop.retrieval.store import Store
    from ragloop.retrieval.store_postgres import (
        PostgresKnowledgeBase,
        PostgresStore,
    )

    __version__: str

__all__ = [
    "AgentLoop",
    "AgentResult",
    "AnthropicModel",
    "Budget",
    "BudgetExceeded",
    "BudgetSpend",
    "CacheStats",
    "ChatModel",
    "Chunk",
    "ChunkingConfig",
    "ComponentError",
    "ConfigError",
    "ContextOverflowError",
    "Corpus",
    "CostEstimator",
    "DefaultCostEstimator",
    "DenseSearchUnavailable",
    "Document",
    "E5Embedder",
    "Embedder",
    "EmbedderUnavailable",
    "EmbeddingCache",
    "EmptyTraceError",
    "EntityBridgeRefiner",
    "EvaluationResult",
    "Evaluator",
    "EventKind",
    "ExactEmbeddingCache",
    "ExtractiveGenerator",
    "Generator",
    "GeneratorOutput",
    "GroundedSpan",
    "Grounder",
    "Grounding",
    "GroundingError",
    "HeuristicEvaluator",
    "HeuristicReformulator",
    "HeuristicUnderstander",
    "IngestInterrupted",
    "IngestProgress",
    "IngestReport",
    "KeywordRefiner",
    "KnowledgeBase",
    "KnowledgeBaseNotFound",
    "KnowledgeBaseRetriever",
    "LLMEvaluator",
    "LLMGenerator",
    "LLMJudgeGrounder",
    "LLMReformulator",
    "LLMUnderstander",
    "LexicalGrounder",
    "LoopConfig",
    "LoopEvent",
    "LoopIteration",
    "LoopResult",
    "Message",
    "MiniLMEmbedder",
    "ModelError",
    "ModelHTTPError",
    "ModelResponse",
    "ModelTimeout",
    "OfflineController",
    "OpenAICompatibleEmbedder",
    "OpenAICompatibleModel",
    "ParseFailure",
    "Parsed",
    "PostgresKnowledgeBase",
    "PostgresStore",
    "PseudoRelevanceRefiner",
    "QueryRefiner",
    "QueryShape",
    "QueryUnderstander",
    "RAGLoop",
    "RagloopError",
    "RefineContext",
    "RefinerChain",
    "ReformulationOutput",
    "ReformulationStrategy",
    "Reformulator",
    "RetrievalIteration",
    "RetrievalLoop",
    "RetrievalLoopConfig",
    "RetrievalLoopError",
    "RetrievalResult",
    "RetrievalRouter",
    "Retriever",
    "RouteDecision",
    "Router",
    "ScriptExhausted",
    "SemanticEmbeddingCache",
    "SpanSource",
    "StopReason",
    "Store",
    "StoreError",
    "Tool",
    "ToolCall",
    "ToolHistoryEntry",
    "TraceCorrupted",
    "TraceNotFound",
    "TraceRecord",
    "TraceRecorder",
    "TraceStore",
    "UnderstoodQuery",
    "UnderstoodQueryLike",
    "Usage",
    "__version__",
    "aground",
    "as_async_generate_fn",
    "as_generate_fn",
    "get_embedder",
    "get_model",
    "ground",
    "listen",
    "parse_llm_json",
    "record_usage",
    "resolve_model",
    "set_trace_content",
]

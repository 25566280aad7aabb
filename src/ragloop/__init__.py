"""ragloop: loop engineering for RAG.

Retrieval loops that notice when the evidence misses, try again, and record every step.
See README.md for the quick start. ``__all__`` is the front door, what a newcomer needs and
ragsnag's names; every other public name (``_EXPORTS``) resolves from here too and is listed in
its own package's face (``ragloop.core``, ``ragloop.components``, ``ragloop.kb``,
``ragloop.engines``, ``ragloop.observability``, ``ragloop.providers``).

``import ragloop`` loads none of it: each name is imported from its module the first time it is
used (PEP 562), so a script or the command line starts in a few milliseconds and only pays for
what it uses (numpy, onnxruntime, httpx, psycopg, rich load where they are needed). Type
checkers and editors read the imports under ``TYPE_CHECKING`` below, which name the same
modules as ``_EXPORTS`` (tests/test_startup.py keeps the two equal).
"""

import importlib as _importlib
import typing as _typing

# where each public name lives, by module: the faces of ragloop.core, .components, .engines
# and .kb list their own (read when a name is first asked for, so ``import ragloop`` loads not
# even them); the others are listed here
_OWN_EXPORTS: dict[str, tuple[str, ...]] = {
    "ragloop.observability": ("EventKind", "LoopEvent", "listen", "set_trace_content"),
    "ragloop.observability.traces": ("TraceRecord", "TraceRecorder", "TraceStorage", "TraceStore"),
    "ragloop.observability.trace_stores": ("PostgresTraceStore", "open_trace_store"),
    "ragloop.providers": (
        "AnthropicModel",
        "OpenAICompatibleEmbedder",
        "OpenAICompatibleModel",
        "get_model",
        "resolve_model",
    ),
}
_FACES = ("ragloop.core", "ragloop.components", "ragloop.engines", "ragloop.kb")
_module_of: dict[str, str] = {}  # name -> module, filled on first use


def _exports() -> dict[str, tuple[str, ...]]:
    faces = [_importlib.import_module(face)._FACE.exports for face in _FACES]
    return {module: names for face in faces for module, names in face.items()} | _OWN_EXPORTS


def _module_of_name(name: str) -> str | None:
    if not _module_of:
        _module_of.update(
            (public, module) for module, names in _exports().items() for public in names
        )
    return _module_of.get(name)


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
    elif name == "_EXPORTS":
        return _exports()
    elif (module := _module_of_name(name)) is not None:
        value = getattr(_importlib.import_module(module), name)
    elif name in _SUBPACKAGES:
        return _importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in __all__:
        globals()[name] = value  # later uses are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if _typing.TYPE_CHECKING:  # the lazy names as type checkers and editors see them
    from ragloop.components.cost import DefaultCostEstimator
    from ragloop.components.evaluators import HeuristicEvaluator, LLMEvaluator
    from ragloop.components.generators import ExtractiveGenerator, LLMGenerator
    from ragloop.components.grounding import LexicalGrounder, LLMJudgeGrounder
    from ragloop.components.heuristics.controller import OfflineController
    from ragloop.components.heuristics.corpus import Corpus
    from ragloop.components.refiners import (
        EntityBridgeRefiner,
        KeywordRefiner,
        PseudoRelevanceRefiner,
        RefinerChain,
    )
    from ragloop.components.reformulators import HeuristicReformulator, LLMReformulator
    from ragloop.components.understanding import HeuristicUnderstander, LLMUnderstander
    from ragloop.core.budget import Budget, BudgetSpend, record_usage
    from ragloop.core.calls import as_async_generate_fn, as_generate_fn
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
    from ragloop.core.jsonparse import Parsed, ParseFailure, parse_llm_json
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
    from ragloop.core.records import (
        Chunk,
        Message,
        ModelResponse,
        StopReason,
        Tool,
        ToolCall,
        Usage,
    )
    from ragloop.core.records.agent import (
        AgentResult,
        GroundedSpan,
        Grounding,
        SpanSource,
        ToolHistoryEntry,
    )
    from ragloop.core.records.rag import (
        EvaluationResult,
        GeneratorOutput,
        LoopIteration,
        LoopResult,
        ReformulationOutput,
        ReformulationStrategy,
    )
    from ragloop.core.records.retrieval import (
        CacheStats,
        QueryShape,
        RefineContext,
        RetrievalIteration,
        RetrievalResult,
        RouteDecision,
        UnderstoodQuery,
    )
    from ragloop.engines.agent import AgentLoop
    from ragloop.engines.grounding import aground, ground
    from ragloop.engines.options import LoopConfig, RetrievalLoopConfig
    from ragloop.engines.rag import RAGLoop
    from ragloop.engines.retrieval import RetrievalLoop
    from ragloop.kb.embedding.cache import ExactEmbeddingCache, SemanticEmbeddingCache
    from ragloop.kb.embedding.embedders import E5Embedder, MiniLMEmbedder, get_embedder
    from ragloop.kb.ingest.chunking import ChunkingConfig
    from ragloop.kb.ingest.discover import IngestInterrupted, IngestProgress, IngestReport
    from ragloop.kb.knowledge_base import Document, KnowledgeBase, KnowledgeBaseRetriever
    from ragloop.kb.routing import RetrievalRouter
    from ragloop.kb.stores.base import Store
    from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase, PostgresStore
    from ragloop.kb.watch import FolderWatcher, WatchBatch
    from ragloop.observability import EventKind, LoopEvent, listen, set_trace_content
    from ragloop.observability.trace_stores import PostgresTraceStore, open_trace_store
    from ragloop.observability.traces import TraceRecord, TraceRecorder, TraceStorage, TraceStore
    from ragloop.providers import (
        AnthropicModel,
        OpenAICompatibleEmbedder,
        OpenAICompatibleModel,
        get_model,
        resolve_model,
    )

    __version__: str

# The front door: what a newcomer needs (engines, knowledge base, results, budget, models, the
# seams users implement, events and traces, errors) and ragsnag's 17 names (seed 000's API,
# name for name). Every other public name in _EXPORTS still resolves from the root, and each is
# listed in its own package's face (ragloop.core, ragloop.components, ragloop.kb, ...);
# tests/test_exported_members.py holds ragsnag's names.
__all__ = [
    "AgentLoop",
    "AgentResult",
    "Budget",
    "ChatModel",
    "Chunk",
    "ComponentError",
    "ConfigError",
    "Document",
    "Embedder",
    "EvaluationResult",
    "Evaluator",
    "EventKind",
    "ExtractiveGenerator",
    "Generator",
    "GeneratorOutput",
    "HeuristicEvaluator",
    "HeuristicReformulator",
    "IngestReport",
    "KnowledgeBase",
    "KnowledgeBaseRetriever",
    "LLMEvaluator",
    "LLMGenerator",
    "LLMReformulator",
    "LoopConfig",
    "LoopEvent",
    "LoopIteration",
    "LoopResult",
    "Message",
    "ModelError",
    "ModelResponse",
    "PostgresKnowledgeBase",
    "RAGLoop",
    "RagloopError",
    "ReformulationOutput",
    "ReformulationStrategy",
    "Reformulator",
    "RetrievalLoop",
    "RetrievalLoopConfig",
    "RetrievalResult",
    "Retriever",
    "StopReason",
    "Store",
    "StoreError",
    "Tool",
    "ToolCall",
    "TraceStore",
    "__version__",
    "listen",
    "resolve_model",
]

"""ragloop: loop engineering for RAG.

Retrieval loops that notice when the evidence misses, try again, and record every step.
See README.md for the quick start; the public API is exactly ``__all__``.
"""

import importlib.metadata as _metadata

from ragloop.components.controller import OfflineController
from ragloop.components.corpus import Corpus
from ragloop.components.cost import DefaultCostEstimator
from ragloop.components.evaluators import HeuristicEvaluator, LLMEvaluator
from ragloop.components.generators import ExtractiveGenerator, LLMGenerator
from ragloop.components.grounding import LexicalGrounder, LLMJudgeGrounder
from ragloop.components.refiners import (
    EntityBridgeRefiner,
    KeywordRefiner,
    PseudoRelevanceRefiner,
    RefinerChain,
)
from ragloop.components.reformulators import HeuristicReformulator, LLMReformulator
from ragloop.components.understanding import HeuristicUnderstander, LLMUnderstander
from ragloop.core.agent_records import (
    AgentResult,
    GroundedSpan,
    Grounding,
    SpanSource,
    ToolHistoryEntry,
)
from ragloop.core.budget import Budget, BudgetSpend, record_usage
from ragloop.core.calls import as_async_generate_fn, as_generate_fn
from ragloop.core.errors import (
    BudgetExceeded,
    ComponentError,
    ConfigError,
    EmptyTraceError,
    GroundingError,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    RagloopError,
    RetrievalLoopError,
    ScriptExhausted,
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
from ragloop.core.rag_records import (
    EvaluationResult,
    GeneratorOutput,
    LoopIteration,
    LoopResult,
    ReformulationOutput,
    ReformulationStrategy,
)
from ragloop.core.records import Chunk, Message, ModelResponse, StopReason, Tool, ToolCall, Usage
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
from ragloop.engines.grounding import aground, ground
from ragloop.engines.rag import LoopConfig, RAGLoop
from ragloop.engines.retrieval import RetrievalLoop, RetrievalLoopConfig
from ragloop.observability import EventKind, LoopEvent, listen, set_trace_content
from ragloop.observability.traces import TraceRecord, TraceRecorder, TraceStore
from ragloop.providers import (
    AnthropicModel,
    OpenAICompatibleEmbedder,
    OpenAICompatibleModel,
    get_model,
    resolve_model,
)
from ragloop.retrieval.chunking import ChunkingConfig
from ragloop.retrieval.embedders import (
    E5Embedder,
    EmbedderUnavailable,
    MiniLMEmbedder,
    get_embedder,
)
from ragloop.retrieval.embedding_cache import ExactEmbeddingCache, SemanticEmbeddingCache
from ragloop.retrieval.ingest import IngestReport
from ragloop.retrieval.knowledge_base import (
    DenseSearchUnavailable,
    Document,
    KnowledgeBase,
    KnowledgeBaseNotFound,
    KnowledgeBaseRetriever,
)
from ragloop.retrieval.routing import RetrievalRouter
from ragloop.retrieval.store import Store, StoreError
from ragloop.retrieval.store_postgres import PostgresKnowledgeBase, PostgresStore

try:
    __version__ = _metadata.version("ragloop")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "unknown"

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

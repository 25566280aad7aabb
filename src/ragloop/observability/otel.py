"""OpenTelemetry spans through ``opentelemetry-api`` only (extra ``ragloop[otel]``).

Without the API installed every function here is a no-op. With it, spans go to whatever
tracer provider the application configured (none configured: the API's own no-op). Every
attribute name ragloop writes is in this module; the ``gen_ai.*`` names follow the OpenTelemetry
GenAI semantic conventions (status: development, pinned at semantic-conventions 1.45), and each
span also carries ``openinference.span.kind`` for Phoenix.

Spans, all INTERNAL except the CLIENT ``chat`` span:

- ``invoke_agent {engine}``: one per run, with the run's outcome when it ends;
- ``retrieval`` (``retrieval {collection}`` when scoped): one per retriever call;
- ``execute_tool {name}``: one per tool the agent runs;
- ``chat {model}``: one per model call (controller, answerer, evaluator, reformulator).

Content (queries, prompts, messages, tool arguments and results) is recorded only when
:func:`~ragloop.observability.settings.trace_content_enabled` says so. Chunk ids and scores are
not content and are always recorded.

``gen_ai.conversation.id`` is not set: the conventions ask not to fill it with a generated id,
so the run's id is ``ragloop.run.id``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from ragloop.core.budget import BudgetSpend
from ragloop.core.errors import server_text, withhold
from ragloop.core.records import Chunk, Message, ModelResponse, Tool
from ragloop.core.redaction import redact, redact_all
from ragloop.observability.settings import trace_content_enabled

try:  # the optional dependency: ragloop[otel]
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised in a subprocess test without the API
    _trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.trace import Span as _OtelSpan

TRACER_NAME = "ragloop"

# -- attribute names: GenAI semantic conventions ------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
GEN_AI_DATA_SOURCE_ID = "gen_ai.data_source.id"
GEN_AI_RETRIEVAL_TOP_K = "gen_ai.retrieval.top_k"
GEN_AI_RETRIEVAL_QUERY_TEXT = "gen_ai.retrieval.query.text"
GEN_AI_RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"

# -- OpenInference (Phoenix) --------------------------------------------------------------------
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"

# -- ragloop's own ------------------------------------------------------------------------------
RAGLOOP_RUN_ID = "ragloop.run.id"
RAGLOOP_LLM_ROLE = "ragloop.llm.role"
RAGLOOP_ITERATIONS = "ragloop.iterations"
RAGLOOP_STOP_REASON = "ragloop.stop_reason"
RAGLOOP_ERROR = "ragloop.error"
RAGLOOP_CHUNK_COUNT = "ragloop.chunks.count"
RAGLOOP_BUDGET_TOKENS = "ragloop.budget.tokens"
RAGLOOP_BUDGET_DOLLARS = "ragloop.budget.dollars"
RAGLOOP_BUDGET_WALL_MS = "ragloop.budget.wall_ms"
RAGLOOP_BUDGET_ITERS = "ragloop.budget.iters"
RAGLOOP_RESULT_COUNT = "ragloop.retrieval.result_count"
RAGLOOP_RETRIEVAL_ROUTE = "ragloop.retrieval.route"
# the retrieval loop's run span (seed 004's rag.agent_loop.* attributes)
RAGLOOP_MAX_ITERATIONS = "ragloop.max_iterations"
RAGLOOP_ALLOW_ROUTE_SWITCH = "ragloop.routing.allow_route_switch"
RAGLOOP_PLAN_REUSE_RATE = "ragloop.routing.plan_reuse_rate"
RAGLOOP_STICKY_ROUTE_RATE = "ragloop.routing.sticky_route_rate"
RAGLOOP_CACHE_HITS = "ragloop.cache.embedding.hits"
RAGLOOP_CACHE_MISSES = "ragloop.cache.embedding.misses"

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]


def available() -> bool:
    """True when ``opentelemetry-api`` is importable (spans may then be recorded)."""
    return _trace is not None


def _value(value: object) -> AttributeValue | None:
    """An attribute value OTel accepts; anything structured becomes JSON."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, list | tuple) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        return list(value)
    return json.dumps(value, default=str, ensure_ascii=False)


def clean(attributes: Mapping[str, object]) -> dict[str, AttributeValue]:
    """Attributes with None dropped, every value in a form OTel accepts, secrets redacted."""
    out: dict[str, AttributeValue] = {}
    for key, raw in attributes.items():
        value = _value(raw)
        if value is not None:
            out[key] = redact_all(value)
    return out


def public_error(error: BaseException) -> str:
    """What a span records about an exception: its message redacted, and what servers wrote
    in it withheld unless content capture is on."""
    text = redact(f"{type(error).__name__}: {error}")
    return text if trace_content_enabled() else withhold(text, server_text(error))


class Span:
    """A recording span, or nothing when OpenTelemetry is missing or not configured."""

    def __init__(self, span: _OtelSpan | None) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        return self._span is not None and self._span.is_recording()

    def set(self, attributes: Mapping[str, object]) -> None:
        if self._span is not None:
            self._span.set_attributes(clean(attributes))

    def fail(self, description: str) -> None:
        """Mark the span as failed (for errors the engine handles instead of raising)."""
        if self._span is not None and _trace is not None:
            self._span.set_status(_trace.Status(_trace.StatusCode.ERROR, redact(description)))


@contextmanager
def _span(name: str, attributes: Mapping[str, object], *, client: bool = False) -> Iterator[Span]:
    if _trace is None:
        yield Span(None)
        return
    kind = _trace.SpanKind.CLIENT if client else _trace.SpanKind.INTERNAL
    tracer = _trace.get_tracer(TRACER_NAME)
    # exceptions are recorded here, not by OTel: their messages may hold a server's reply
    with tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=clean(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield Span(span)
        except BaseException as error:
            text = public_error(error)
            span.add_event(
                "exception", {"exception.type": type(error).__name__, "exception.message": text}
            )
            span.set_status(_trace.Status(_trace.StatusCode.ERROR, text))
            raise


def add_event(name: str, attributes: Mapping[str, object]) -> None:
    """Add an event to the span active now (nothing happens outside a recording span)."""
    if _trace is None:
        return
    span = _trace.get_current_span()
    if span.is_recording():
        span.add_event(name, clean(attributes))


def _content(attributes: Mapping[str, object]) -> Mapping[str, object]:
    return attributes if trace_content_enabled() else {}


# -- runs ---------------------------------------------------------------------------------------
def run_span(
    engine: str, run_id: str, *, span_kind: str, tools: Sequence[Tool] = ()
) -> AbstractContextManager[Span]:
    """The span of one run: ``invoke_agent {engine}``."""
    definitions = [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.parameters,
        }
        for t in tools
    ]
    return _span(
        f"invoke_agent {engine}",
        {
            GEN_AI_OPERATION_NAME: "invoke_agent",
            GEN_AI_AGENT_NAME: engine,
            OPENINFERENCE_SPAN_KIND: span_kind,
            RAGLOOP_RUN_ID: run_id,
            GEN_AI_TOOL_DEFINITIONS: definitions or None,
        },
    )


def run_outcome(
    *,
    stop_reason: str,
    iterations: int,
    budget_used: BudgetSpend,
    chunk_count: int,
    error: str | None = None,
) -> dict[str, object]:
    """The attributes a run span gets when the run ends."""
    return {
        RAGLOOP_STOP_REASON: stop_reason,
        RAGLOOP_ITERATIONS: iterations,
        RAGLOOP_CHUNK_COUNT: chunk_count,
        RAGLOOP_BUDGET_TOKENS: budget_used.tokens,
        RAGLOOP_BUDGET_DOLLARS: budget_used.dollars,
        RAGLOOP_BUDGET_WALL_MS: budget_used.wall_ms,
        RAGLOOP_BUDGET_ITERS: budget_used.iters,
        RAGLOOP_ERROR: error,
    }


def retrieval_loop_settings(*, max_iterations: int, allow_route_switch: bool) -> dict[str, object]:
    """The attributes a retrieval-loop run span gets when the run starts."""
    return {
        RAGLOOP_MAX_ITERATIONS: max_iterations,
        RAGLOOP_ALLOW_ROUTE_SWITCH: allow_route_switch,
    }


def retrieval_loop_outcome(
    *, cache_hits: int, cache_misses: int, plan_reuse_rate: float, sticky_route_rate: float
) -> dict[str, object]:
    """What a retrieval-loop run span adds to :func:`run_outcome` when the run ends."""
    return {
        RAGLOOP_CACHE_HITS: cache_hits,
        RAGLOOP_CACHE_MISSES: cache_misses,
        RAGLOOP_PLAN_REUSE_RATE: plan_reuse_rate,
        RAGLOOP_STICKY_ROUTE_RATE: sticky_route_rate,
    }


# -- retrieval ----------------------------------------------------------------------------------
def retrieval_span(
    query: str,
    *,
    top_k: int,
    run_id: str | None,
    data_source: str | None = None,
    route: str | None = None,
) -> AbstractContextManager[Span]:
    """The span of one retriever call; ``route`` is the search mode a router picked."""
    name = f"retrieval {data_source}" if data_source else "retrieval"
    return _span(
        name,
        {
            GEN_AI_OPERATION_NAME: "retrieval",
            OPENINFERENCE_SPAN_KIND: "RETRIEVER",
            GEN_AI_RETRIEVAL_TOP_K: top_k,
            GEN_AI_DATA_SOURCE_ID: data_source,
            RAGLOOP_RETRIEVAL_ROUTE: route,
            RAGLOOP_RUN_ID: run_id,
            **_content({GEN_AI_RETRIEVAL_QUERY_TEXT: query}),
        },
    )


def retrieved(chunks: Sequence[Chunk]) -> dict[str, object]:
    """What a retrieval span records about its results: ids and scores, never text."""
    return {
        RAGLOOP_RESULT_COUNT: len(chunks),
        GEN_AI_RETRIEVAL_DOCUMENTS: [{"id": c.id, "score": c.score} for c in chunks],
    }


# -- tools --------------------------------------------------------------------------------------
def tool_span(
    name: str, call_id: str, *, arguments: Mapping[str, Any], run_id: str | None
) -> AbstractContextManager[Span]:
    """The span of one tool execution: ``execute_tool {name}``."""
    return _span(
        f"execute_tool {name}",
        {
            GEN_AI_OPERATION_NAME: "execute_tool",
            OPENINFERENCE_SPAN_KIND: "TOOL",
            GEN_AI_TOOL_NAME: name,
            GEN_AI_TOOL_CALL_ID: call_id,
            RAGLOOP_RUN_ID: run_id,
            **_content({GEN_AI_TOOL_CALL_ARGUMENTS: dict(arguments)}),
        },
    )


def tool_result(text: str) -> Mapping[str, object]:
    return _content({GEN_AI_TOOL_CALL_RESULT: text})


# -- model calls --------------------------------------------------------------------------------
def _message_parts(message: Message) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        )
    elif message.content:
        parts.append({"type": "text", "content": message.content})
    parts.extend(
        {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
        for c in message.tool_calls
    )
    return {"role": message.role, "parts": parts}


def chat_span(
    model: str,
    *,
    provider: str,
    role: str,
    messages: Sequence[Message],
    run_id: str | None,
    max_tokens: int | None = None,
) -> AbstractContextManager[Span]:
    """The span of one model call: ``chat {model}``."""
    return _span(
        f"chat {model}",
        {
            GEN_AI_OPERATION_NAME: "chat",
            OPENINFERENCE_SPAN_KIND: "LLM",
            GEN_AI_PROVIDER_NAME: provider,
            GEN_AI_REQUEST_MODEL: model,
            GEN_AI_REQUEST_MAX_TOKENS: max_tokens,
            RAGLOOP_LLM_ROLE: role,
            RAGLOOP_RUN_ID: run_id,
            **_content({GEN_AI_INPUT_MESSAGES: [_message_parts(m) for m in messages]}),
        },
        client=True,
    )


def chat_response(response: ModelResponse) -> dict[str, object]:
    """What a chat span records about the reply. Providers may add ``model``, ``id`` and
    ``finish_reason`` to their responses; they are read when present."""
    finish = getattr(response, "finish_reason", None)
    usage = response.usage
    reply = Message(role="assistant", content=response.text, tool_calls=response.tool_calls)
    return {
        GEN_AI_RESPONSE_MODEL: getattr(response, "model", None),
        GEN_AI_RESPONSE_ID: getattr(response, "id", None),
        GEN_AI_RESPONSE_FINISH_REASONS: [str(finish)] if finish else None,
        GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens if usage else None,
        GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens if usage else None,
        **_content({GEN_AI_OUTPUT_MESSAGES: [_message_parts(reply)]}),
    }

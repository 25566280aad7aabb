"""Every parser of untrusted input, fuzzed: model replies (evaluator, reformulator, judge,
understander, generator), tool-call arguments (the agent's search, the providers' tolerant
parsing and their wire bodies), stored trace JSON and the ingest decoder. Each either returns a
well-formed value or raises one of ragloop's documented errors; nothing else may escape.

The default run uses the "ci" hypothesis profile (tests/conftest.py); RAGLOOP_FUZZ=long runs
the same properties with thousands of examples each.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragloop import (
    Chunk,
    EvaluationResult,
    GroundingError,
    LLMEvaluator,
    LLMGenerator,
    LLMJudgeGrounder,
    LLMReformulator,
    LLMUnderstander,
    LoopIteration,
    ModelError,
    RagloopError,
    ReformulationOutput,
    Tool,
)
from ragloop.core.jsonparse import Parsed, ParseFailure, parse_llm_json
from ragloop.core.records import ModelResponse
from ragloop.engines.tools import MAX_LIMIT, CollectionScope, SearchRequest, search_request
from ragloop.kb.ingest.discover import SkipFile, load_file
from ragloop.observability.events import EventKind, LoopEvent
from ragloop.observability.report_html import render_html
from ragloop.observability.trace_reading import trace_steps
from ragloop.observability.traces import TraceRecord, TraceStore
from ragloop.providers.anthropic import AnthropicModel
from ragloop.providers.openai_compat import OpenAICompatibleModel
from ragloop.providers.tools import parse_arguments, parse_text_tool_calls
from tests.reliability.strategies import JSON_VALUES, llm_replies, objects

CHUNKS = [
    Chunk(content="Tents carry a three-year guarantee.", source="tents.md", score=0.9),
    Chunk(content="Stoves are not for rent.", source="stoves.md", score=0.4),
]
ANSWER = "Tents carry a three-year guarantee. Stoves can be rented."
HISTORY = [
    LoopIteration(
        iteration=1,
        query="tent warranty",
        chunks=CHUNKS,
        answer=ANSWER,
        confidence=0.5,
        evaluation=EvaluationResult(
            is_grounded=False, is_complete=False, score=0.2, reason="missing"
        ),
    )
]
TOOLS = [
    Tool(name="search", description="search", parameters={"type": "object"}),
    Tool(name="answer", description="answer", parameters={"type": "object"}),
]


def reply_with(text: str):
    return lambda prompt: text


@given(llm_replies(["is_grounded", "is_complete", "score", "reason"]))
def test_evaluator_reads_any_reply_as_a_verdict(reply):
    result = LLMEvaluator(reply_with(reply)).evaluate("tent warranty?", CHUNKS, ANSWER)
    assert 0.0 <= result.score <= 1.0
    if result.parse_failed:
        assert result.score == 0.0
        assert not result.is_grounded


@given(llm_replies(["strategy", "queries", "reasoning"]))
def test_reformulator_always_returns_queries(reply):
    out = LLMReformulator(reply_with(reply)).reformulate("tent warranty?", HISTORY)
    assert isinstance(out, ReformulationOutput)
    assert out.queries
    assert all(isinstance(q, str) and q.strip() for q in out.queries)


@given(llm_replies(["rewritten", "sub_queries", "shape", "hyde"]))
def test_understander_always_returns_a_plan(reply):
    plan = LLMUnderstander(reply_with(reply)).understand("tent warranty and stove rental?")
    assert plan.rewritten.strip()
    assert all(isinstance(q, str) for q in plan.sub_queries)


@given(
    st.one_of(
        llm_replies(["claims"]),
        objects(["text", "verdict", "chunk_indices"]).map(
            lambda claim: json.dumps({"claims": [claim]}, default=str)
        ),
    )
)
def test_judge_scores_or_raises_grounding_error(reply):
    try:
        grounding = LLMJudgeGrounder(reply_with(reply)).ground(ANSWER, CHUNKS)
    except GroundingError:
        return
    assert 0.0 <= grounding.score <= 1.0
    for span in grounding.faithful_spans + grounding.hallucinated_spans:
        assert ANSWER[span.start : span.end] == span.text
        assert {s.chunk_id for s in span.sources} <= {c.id for c in CHUNKS}


@given(llm_replies(["answer", "confidence"]))
def test_generator_always_answers(reply):
    out = LLMGenerator(reply_with(reply)).generate("tent warranty?", CHUNKS)
    assert isinstance(out.answer, str)
    assert 0.0 <= out.confidence <= 1.0


@given(st.one_of(st.text(), JSON_VALUES))
def test_parse_llm_json_never_raises(value):
    found = parse_llm_json(value, EvaluationResult)
    assert isinstance(found, Parsed | ParseFailure)


# -- tool-call arguments -------------------------------------------------------------------------


@given(st.one_of(llm_replies(["query", "limit", "collection"]), JSON_VALUES))
def test_tool_arguments_parse_to_a_dict(raw):
    assert isinstance(parse_arguments(raw, "search"), dict)


@given(llm_replies(["tool_calls", "name", "arguments"]))
def test_text_protocol_calls_only_known_tools(reply):
    response = parse_text_tool_calls(reply, TOOLS)
    assert {c.name for c in response.tool_calls} <= {"search", "answer"}
    assert all(isinstance(c.arguments, dict) for c in response.tool_calls)


@given(
    objects(["query", "limit", "collection"]),
    st.sampled_from([None, [], ["a"], ["a", "b"]]),
)
def test_search_arguments_stay_in_scope_and_bounds(arguments, allowed):
    scope = CollectionScope.of(allowed)
    request = search_request(arguments, scope)
    if isinstance(request, str):
        assert request.startswith("search error")
        return
    assert isinstance(request, SearchRequest)
    assert request.query.strip()
    assert 1 <= request.limit <= MAX_LIMIT
    target = request.target
    if allowed == []:
        assert target.nothing
    elif allowed is not None:
        assert set(target.collections or [target.collection]) <= set(allowed)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(JSON_VALUES, objects(["choices", "usage", "content"])), tools=st.booleans())
def test_provider_bodies_read_or_raise_model_error(body, tools):
    for model in (
        OpenAICompatibleModel("m", base_url="http://127.0.0.1:9/v1", supports_tools=False),
        AnthropicModel("m", base_url="http://127.0.0.1:9", api_key="k"),
    ):
        try:
            response = model._response(body, TOOLS if tools else None)
        except ModelError:
            continue
        assert isinstance(response, ModelResponse)


@st.composite
def openai_bodies(draw):
    call = {
        "id": draw(st.one_of(st.none(), st.text(max_size=8))),
        "function": {
            "name": draw(st.sampled_from(["search", "answer", "nope"])),
            "arguments": draw(st.one_of(llm_replies(["query", "limit"]), JSON_VALUES)),
        },
    }
    message = {"content": draw(st.one_of(st.none(), st.text())), "tool_calls": [call]}
    return {"choices": [{"message": message}], "usage": draw(st.one_of(st.none(), JSON_VALUES))}


@given(openai_bodies())
def test_openai_tool_call_arguments_are_tolerated(body):
    model = OpenAICompatibleModel("m", base_url="http://127.0.0.1:9/v1")
    try:
        response = model._response(body, TOOLS)
    except ModelError:
        return
    assert all(isinstance(c.arguments, dict) for c in response.tool_calls)


# -- stored traces -------------------------------------------------------------------------------


@st.composite
def trace_records(draw):
    engine = draw(st.sampled_from(["rag", "agent", "retrieval", "x"]))
    events = [
        LoopEvent(
            engine=engine,
            kind=draw(st.sampled_from(list(EventKind))),
            run_id="r1",
            iteration=draw(st.one_of(st.none(), st.integers(-2, 5))),
            attributes=draw(
                objects(
                    [
                        "queries",
                        "strategy",
                        "score",
                        "reason",
                        "answer",
                        "chunks",
                        "chunk_texts",
                        "tool",
                        "args",
                        "text",
                        "stop_reason",
                        "iterations",
                        "question",
                    ]
                )
            ),
            timestamp=draw(st.floats(0, 2e9)),
        )
        for _ in range(draw(st.integers(1, 5)))
    ]
    return events


@settings(max_examples=max(10, settings.default.max_examples // 3))
@given(trace_records())
def test_trace_steps_and_html_read_any_stored_events(events):
    try:
        record = TraceRecord.from_events(events, content=True)
    except (RagloopError, ValueError):
        return
    steps = trace_steps(record)
    assert all(isinstance(s.number, int) for s in steps)
    assert "<html" in render_html(record).lower()


@pytest.fixture(scope="module")
def trace_db(tmp_path_factory):
    store = TraceStore(tmp_path_factory.mktemp("traces") / "t.sqlite")
    record = TraceRecord.from_events(
        [LoopEvent(engine="rag", kind=EventKind.RUN_STARTED, run_id="good")], content=False
    )
    store.save(record)
    store.close()
    return store.path


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    meta=st.one_of(st.text(), JSON_VALUES.map(lambda v: json.dumps(v, default=str))),
    events=st.one_of(st.text(), JSON_VALUES.map(lambda v: json.dumps(v, default=str))),
    stop=st.one_of(st.none(), st.text(max_size=10)),
)
def test_a_corrupted_trace_row_is_a_trace_error(trace_db, meta, events, stop):
    conn = sqlite3.connect(trace_db)
    with conn:
        conn.execute(
            "INSERT OR REPLACE INTO traces (id, engine, started_at, stop_reason, content, meta, "
            "events) VALUES ('bad', 'rag', 0, ?, 1, ?, ?)",
            (stop, meta, events),
        )
    conn.close()
    store = TraceStore(trace_db)
    try:
        for listed in store.list():
            assert listed.id in {"good", "bad"}
        try:
            record = store.get("bad")
        except RagloopError:
            return
        trace_steps(record)
        render_html(record)
    finally:
        store.close()


# -- the ingest decoder --------------------------------------------------------------------------

SUFFIXES = [".txt", ".md", ".rst", ".html", ".json", ".jsonl", ".csv", ".pdf"]
PREFIXES = [b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00", b"%PDF-1.4\n"]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        st.binary(max_size=3000),
        st.text(max_size=2000).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.text(max_size=500).map(lambda t: t.encode("utf-16-le", "surrogatepass")),
    ),
    prefix=st.sampled_from(PREFIXES),
    suffix=st.sampled_from(SUFFIXES),
)
def test_the_ingest_decoder_parses_or_skips_any_bytes(tmp_path, data, prefix, suffix):
    path = Path(tmp_path) / f"fuzz{suffix}"
    path.write_bytes(prefix + data)
    try:
        loaded = load_file(path, max_bytes=1_000_000, encodings=("cp1252",))
    except SkipFile as reason:
        reasons = [str(reason)]
        assert reasons[0]
        return
    assert any(block.text.strip() for block in loaded.document.blocks)


@pytest.mark.fuzz
@settings(max_examples=20_000)
@given(llm_replies(["is_grounded", "is_complete", "score", "reason"]))
def test_long_fuzz_of_the_json_extractor(reply):
    assert isinstance(parse_llm_json(reply, EvaluationResult), Parsed | ParseFailure)


def test_a_score_too_large_for_a_float_is_no_score():
    events = [
        LoopEvent(engine="rag", kind=EventKind.RUN_STARTED, run_id="r"),
        LoopEvent(
            engine="rag",
            kind=EventKind.ITERATION,
            run_id="r",
            iteration=1,
            attributes={"score": 10**400, "queries": ["q"]},
        ),
    ]
    record = TraceRecord.from_events(events, content=True)
    steps = trace_steps(record)
    assert [s.score for s in steps] == [None]
    assert "<html" in render_html(record).lower()

"""Privacy: with content capture off (the default), no document, question, prompt, query or
answer text reaches the stored trace, the log records or the OpenTelemetry spans of any
engine. With capture on, it does (so the check can fail)."""

from __future__ import annotations

import json
import logging

import pytest

from ragloop import (
    AgentLoop,
    Document,
    KnowledgeBase,
    LLMEvaluator,
    LLMGenerator,
    LLMReformulator,
    LLMUnderstander,
    LoopConfig,
    RAGLoop,
    RetrievalLoop,
    RetrievalLoopConfig,
)
from ragloop.observability import set_trace_content
from ragloop.observability.traces import TraceRecorder
from ragloop.testing import FunctionModel
from tests.helpers import answer_call, search_call, turn

DOC_MARK = "zanzibarite"  # a word only the document holds
ASK_MARK = "quokkaflux"  # a word only the question holds
QUESTION = f"Does the {ASK_MARK} tent use zanzibarite poles?"


def llm(prompt: str) -> str:
    if "grading an answer" in prompt:
        return '{"is_grounded": true, "is_complete": false, "score": 0.2, "reason": "more"}'
    if "rewrite search queries" in prompt:
        return f'{{"strategy": "expand", "queries": ["{DOC_MARK} poles"], "reasoning": "r"}}'
    if "prepare a user's question" in prompt:
        return f'{{"rewritten": "{DOC_MARK} poles", "shape": "keyword"}}'
    return f'{{"answer": "Yes, {DOC_MARK} poles [1].", "confidence": 0.5}}'


def controller(messages, tools):
    if sum(1 for m in messages if m.role == "assistant") == 0:
        return turn(search_call(f"{DOC_MARK} poles"))
    return turn(answer_call(f"Yes, {DOC_MARK} poles."))


def engines(kb: KnowledgeBase):
    retriever = kb.retriever(mode="bm25")
    yield (
        "rag",
        lambda: RAGLoop(
            retriever, LLMGenerator(llm), LLMEvaluator(llm), LLMReformulator(llm), LoopConfig()
        ).run(QUESTION),
    )
    yield "agent", lambda: AgentLoop(FunctionModel(controller), retriever).run(QUESTION)
    yield (
        "retrieval",
        lambda: RetrievalLoop(
            retriever,
            understander=LLMUnderstander(llm),
            config=RetrievalLoopConfig(max_iterations=2, min_new_chunks_per_iter=0),
        ).run(QUESTION),
    )


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.events: list[object] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append(getattr(record, "ragloop_event", None))
        self.events.append(record.getMessage())


def _telemetry_text(spans, recorder: TraceRecorder, handler: Records) -> str:
    parts = [json.dumps(r.model_dump(mode="json")) for r in recorder.records.values()]
    parts += [json.dumps(handler.events, default=str)]
    for span in spans.get_finished_spans():
        parts.append(span.name + json.dumps(dict(span.attributes or {}), default=str))
        for event in span.events:
            parts.append(event.name + json.dumps(dict(event.attributes or {}), default=str))
    return "\n".join(parts)


@pytest.mark.parametrize("capture", [False, True])
def test_no_content_leaves_any_engine_unless_enabled(spans, capture):
    kb = KnowledgeBase.in_memory(embedder=None)
    kb.add_documents([Document(text=f"The Skylark tent uses {DOC_MARK} poles.", source="tents.md")])
    set_trace_content(capture)
    handler = Records()
    logger = logging.getLogger("ragloop")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        for name, run in engines(kb):
            spans.clear()
            with TraceRecorder() as recorder:
                run()
            assert recorder.records, name
            text = _telemetry_text(spans, recorder, handler)
            assert spans.get_finished_spans(), name
            for mark in (DOC_MARK, ASK_MARK):
                assert (mark in text) is capture, (name, mark)
            handler.events.clear()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)

"""Privacy: with content capture off (the default), no document, question, prompt, query or
answer text reaches the log records or the OpenTelemetry spans of any engine; with capture on,
it does (so the check can fail). A local trace (TraceRecorder) keeps the question and answer by
default, whatever the switch, and none with content=False (`[traces] content = false`), even
with capture on."""

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


def _trace_text(recorder: TraceRecorder) -> str:
    return "\n".join(json.dumps(r.model_dump(mode="json")) for r in recorder.records.values())


def _exported_text(spans, handler: Records) -> str:
    parts = [json.dumps(handler.events, default=str)]
    for span in spans.get_finished_spans():
        parts.append(span.name + json.dumps(dict(span.attributes or {}), default=str))
        for event in span.events:
            parts.append(event.name + json.dumps(dict(event.attributes or {}), default=str))
    return "\n".join(parts)


@pytest.mark.parametrize("capture", [False, True])
def test_no_content_is_exported_unless_enabled_and_local_traces_choose_for_themselves(
    spans, capture
):
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
            with (
                TraceRecorder() as local,
                TraceRecorder(content=False) as bare,
                TraceRecorder(content=None) as switched,
            ):
                run()
            assert local.records, name
            assert spans.get_finished_spans(), name
            exported = _exported_text(spans, handler)
            for mark in (DOC_MARK, ASK_MARK):
                assert (mark in exported) is capture, (name, mark)
                assert (mark in _trace_text(switched)) is capture, (name, mark)
                assert mark not in _trace_text(bare), (name, mark)
            # the local trace keeps the question and the answer by default
            assert ASK_MARK in _trace_text(local), name
            (record,) = local.records.values()
            assert record.content
            assert record.question == QUESTION
            assert DOC_MARK in (record.answer or "") or name == "retrieval", name
            assert not next(iter(bare.records.values())).content
            handler.events.clear()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)

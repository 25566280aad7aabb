"""LLM-backed evaluation of answers (ragsnag's ``LLMEvaluator``, with tolerant parsing)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, field_validator

from ragloop.components.prompts import evaluator_prompt
from ragloop.core.calls import GenerateFn, run_sync
from ragloop.core.jsonparse import LenientBool, ParseFailure, UnitScore, parse_llm_json
from ragloop.core.protocols import ChatModel
from ragloop.core.rag_records import EvaluationResult
from ragloop.core.records import Chunk
from ragloop.observability.llm import ask_text

UNPARSEABLE_PREFIX = "Evaluator returned unparseable response"


class _EvaluationReply(BaseModel):
    is_grounded: LenientBool
    is_complete: LenientBool
    score: UnitScore
    reason: str = ""

    @field_validator("reason", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return "" if value is None else str(value)


class LLMEvaluator:
    """Asks an LLM whether the answer is grounded in the chunks and complete.

    ``generate_fn`` is a function of the prompt (called with the prompt as its only positional
    argument, sync or async) that returns the reply text, or a :class:`~ragloop.ChatModel`.
    The reply is read tolerantly (code fences, prose around the JSON, ``"false"``, scores out of
    range, ...). A reply that still cannot be read gives score 0.0, ``is_grounded=False``,
    ``parse_failed=True`` and the reply itself in ``reason``, and the loop goes on.
    """

    def __init__(self, generate_fn: GenerateFn | ChatModel) -> None:
        self.generate_fn = generate_fn

    async def aevaluate(self, query: str, chunks: list[Chunk], answer: str) -> EvaluationResult:
        prompt = evaluator_prompt(query, chunks, answer)
        reply = await ask_text(self.generate_fn, prompt, role="evaluator")
        parsed = parse_llm_json(reply, _EvaluationReply)
        if isinstance(parsed, ParseFailure):
            return EvaluationResult(
                is_grounded=False,
                is_complete=False,
                score=0.0,
                reason=f"{UNPARSEABLE_PREFIX} ({parsed.reason}): {parsed.excerpt()}",
                parse_failed=True,
            )
        value = parsed.value
        return EvaluationResult(
            is_grounded=value.is_grounded,
            is_complete=value.is_complete,
            score=value.score,
            reason=value.reason,
        )

    def evaluate(self, query: str, chunks: list[Chunk], answer: str) -> EvaluationResult:
        return run_sync(lambda: self.aevaluate(query, chunks, answer))

"""Records of the evaluate -> reformulate loop (seed 000): what components return, and the trace.

Field names follow ragsnag's, so its users' code keeps working; the fields after the seed's are
ragloop's additions (strategy and reasoning behind each query, sub-queries, repeats, timings,
usage, errors, budget spend), all with defaults.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field, field_validator

from ragloop.core.budget import BudgetSpend
from ragloop.core.errors import EmptyTraceError
from ragloop.core.limits import LLMCall
from ragloop.core.records import Chunk, StopReason, Usage
from ragloop.core.records.gaps import EvidenceGaps


class ReformulationStrategy(StrEnum):
    """The six ways a reformulator can rewrite a retrieval query."""

    EXPAND = "expand"
    NARROW = "narrow"
    DECOMPOSE = "decompose"
    STEP_BACK = "step_back"
    HYDE = "hyde"
    PERSPECTIVE_SHIFT = "perspective_shift"


class GeneratorOutput(BaseModel):
    """A generator's answer and its self-reported confidence in [0, 1]."""

    answer: str
    confidence: float = Field(ge=0.0, le=1.0)


class EvaluationResult(BaseModel):
    """An evaluator's verdict on an answer. ``reason`` steers the reformulator, so be specific.

    ``parse_failed`` is True when an LLM evaluator could not read its model's reply (the
    ``reason`` then quotes the reply); reformulators do not pick strategies from such text.
    """

    is_grounded: bool
    is_complete: bool
    score: float = Field(ge=0.0, le=1.0)
    reason: str
    parse_failed: bool = False


def _clean_queries(queries: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for query in queries:
        text = " ".join(query.split())
        key = text.casefold()
        if text and key not in seen:
            seen.add(key)
            out.append(text)
    return out


class ReformulationOutput(BaseModel):
    """New retrieval queries (several for DECOMPOSE), the strategy used and why.

    Queries are whitespace-normalised and deduplicated (case-insensitively); at least one
    non-empty query must remain.
    """

    queries: list[str] = Field(min_length=1)
    strategy: ReformulationStrategy
    reasoning: str

    @field_validator("queries")
    @classmethod
    def _non_empty_unique(cls, queries: list[str]) -> list[str]:
        cleaned = _clean_queries(queries)
        if not cleaned:
            raise ValueError("queries must hold at least one non-empty query")
        return cleaned


class LoopIteration(BaseModel):
    """One pass of retrieve -> generate -> evaluate.

    ``query`` is the retrieval query (sub-queries joined with ``" | "``, as in ragsnag);
    ``queries`` is the same as a list. ``strategy`` and ``reasoning`` say how the reformulator
    produced this iteration's queries (None on iteration 1). ``repeated_queries`` lists queries
    already tried earlier in the run, whose chunks came from the run's cache instead of the
    retriever. ``timings_ms`` holds the milliseconds spent in each step; ``reformulate`` is the
    reformulation that produced this iteration's queries. ``usage`` is the model usage reported
    during the iteration, when known. ``llm_calls`` records each model call of the iteration
    (the reformulation that produced its queries first): its role, reply bound, finish reason,
    tokens, and what fitting its prompt to the context window left out.
    """

    iteration: int = Field(ge=1)
    query: str
    chunks: list[Chunk]
    answer: str
    confidence: float = Field(ge=0.0, le=1.0)
    evaluation: EvaluationResult
    queries: list[str] = Field(default_factory=list)
    strategy: ReformulationStrategy | None = None
    reasoning: str | None = None
    repeated_queries: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    usage: Usage | None = None
    llm_calls: list[LLMCall] = Field(default_factory=list)

    @property
    def is_repeat(self) -> bool:
        """True when every query of this iteration had been tried before in the run."""
        return bool(self.queries) and len(self.repeated_queries) == len(self.queries)


class LoopResult(BaseModel):
    """The outcome of a RAGLoop run.

    ``answer`` and ``confidence`` come from the converging iteration, or else from the
    highest-scoring one (earliest on ties); ``confidence`` is the generator's self-report, the
    evaluator's score is ``best_iteration.evaluation.score``. When a budget, an error or the
    caller stops the run early, they come from the best iteration that finished (an empty answer
    with confidence 0 if none did), and ``error`` holds the message of an error stop.
    ``probability`` is the calibrated chance that the answer is right (the evaluator's score
    read through the loop's calibration), ``target_precision`` the chance the run had to reach
    (None when it converged on ``confidence_threshold``), and ``gaps`` the evidence behind an
    answer that is not confident or not complete (:class:`~ragloop.core.records.gaps.EvidenceGaps`:
    the question's parts found and not found, the nearest misses, the searches), else None.
    ``iterations`` counts the iterations that finished, ``trace`` holds them, ``chunks`` are
    those the answer was drawn from: the names every engine's result shares. ``llm_calls`` is
    every model call of the run in order, those of an iteration that did not finish included
    (each finished iteration also lists its own in ``LoopIteration.llm_calls``).
    """

    answer: str
    confidence: float = Field(ge=0.0, le=1.0)
    iterations: int = Field(ge=0)
    stop_reason: StopReason
    trace: list[LoopIteration]
    query: str = ""
    error: str | None = None
    budget_used: BudgetSpend = Field(default_factory=BudgetSpend)
    usage: Usage | None = None
    run_id: str = ""
    llm_calls: list[LLMCall] = Field(default_factory=list)
    probability: float | None = Field(default=None, ge=0.0, le=1.0)
    target_precision: float | None = Field(default=None, ge=0.0, le=1.0)
    gaps: EvidenceGaps | None = None

    @property
    def confident(self) -> bool:
        """Whether the run stands by its answer: it converged (at the target precision, when
        one was set)."""
        return self.stop_reason == StopReason.CONVERGED

    @property
    def chunks(self) -> list[Chunk]:
        """The chunks the answer was drawn from: the best iteration's (none before one)."""
        return self.best_iteration.chunks if self.trace else []

    @property
    def best_iteration(self) -> LoopIteration:
        """The iteration with the highest evaluation score; the earliest wins ties."""
        if not self.trace:
            raise EmptyTraceError(
                f"the run stopped ({self.stop_reason.value}) before finishing an iteration"
            )
        return max(self.trace, key=lambda it: it.evaluation.score)

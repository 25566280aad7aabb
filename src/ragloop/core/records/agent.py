"""Records of the agentic tool loop (seed 001): the tool history, the result, and grounding.

The grounders (``ragloop.components.grounding``) and the engine (``ragloop.engines.agent``)
share them, so they live on the bottom floor.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field

from ragloop.core.budget import BudgetSpend
from ragloop.core.limits import LLMCall
from ragloop.core.records import Chunk, Message, StopReason, Usage
from ragloop.core.records.gaps import EvidenceGaps

Verdict = Literal["supported", "unsupported", "contradicted"]


class ToolHistoryEntry(BaseModel):
    """One tool call of a run, in the order the controller made them.

    ``iteration`` is the 0-based controller turn that made the call. ``summary`` is the text
    the controller read back (for a search, the result text; for a failed call, the error).
    ``returned_chunk_ids`` lists every chunk a search returned, best first. The fallback
    synthesis is recorded as an entry with ``tool="synthesis"``.
    """

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    iteration: int = Field(ge=0)
    summary: str
    returned_chunk_ids: list[str] = Field(default_factory=list)
    call_id: str | None = None

    @property
    def query(self) -> str | None:
        """The search query of a ``search`` entry (None for other tools)."""
        query = self.args.get("query") if self.tool == "search" else None
        return query if isinstance(query, str) else None


class SpanSource(BaseModel):
    """A chunk that supports (or was cited against) a span of the answer.

    ``search_iteration`` and ``search_query`` name the search that first returned the chunk
    (None when no search in the history returned it).
    """

    chunk_id: str
    score: float = Field(ge=0.0, le=1.0)
    search_iteration: int | None = None
    search_query: str | None = None


class GroundedSpan(BaseModel):
    """A claim of the answer: its text, its character offsets in the answer (``answer[start:
    end] == text``), the verdict and the chunks cited for it."""

    text: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    sources: list[SpanSource] = Field(default_factory=list)
    verdict: Verdict = "supported"


class Grounding(BaseModel):
    """How faithful an answer is to the chunks: ``score`` is supported claims / all claims.

    ``faithful_spans`` are the supported claims; ``hallucinated_spans`` the unsupported and
    contradicted ones. A claim the grounder could not locate in the answer counts in the score
    but has no span. ``grounder`` names the grounder that scored it.
    """

    score: float = Field(ge=0.0, le=1.0)
    faithful_spans: list[GroundedSpan] = Field(default_factory=list)
    hallucinated_spans: list[GroundedSpan] = Field(default_factory=list)
    grounder: str = ""

    def attributed(self, history: list[ToolHistoryEntry]) -> Grounding:
        """A copy whose sources name the search that first returned each chunk."""
        first: dict[str, ToolHistoryEntry] = {}
        for entry in history:
            if entry.tool == "search":
                for cid in entry.returned_chunk_ids:
                    first.setdefault(cid, entry)

        def source(s: SpanSource) -> SpanSource:
            entry = first.get(s.chunk_id)
            return s.model_copy(
                update={
                    "search_iteration": entry.iteration if entry else None,
                    "search_query": entry.query if entry else None,
                }
            )

        def span(g: GroundedSpan) -> GroundedSpan:
            return g.model_copy(update={"sources": [source(s) for s in g.sources]})

        return self.model_copy(
            update={
                "faithful_spans": [span(g) for g in self.faithful_spans],
                "hallucinated_spans": [span(g) for g in self.hallucinated_spans],
            }
        )


class AgentResult(BaseModel):
    """The outcome of an :class:`~ragloop.AgentLoop` run. Runs never raise: failures end here.

    - ``query``: the question asked (``question``, Arcana's name, reads the same);
    - ``answer``: the final answer, None when the run ended without one.
    - ``stop_reason`` (also ``terminated_by``): answered, gave_up, max_iterations, error or a
      budget stop.
    - ``iterations``: controller turns, the failing one included.
    - ``tool_history`` (also ``trace``): every tool call, then the fallback synthesis if one ran.
    - ``chunks``: the chunks gathered across searches, deduplicated by id, capped at
      ``chunk_cap``: the best-ranked first (a chunk's rank is its best position in any search).
    - ``shown_chunks``: every chunk whose text the controller was shown, in the order first
      shown, never capped: grounding judges the answer against these.
    - ``error``: what went wrong (a controller failure, a failed fallback synthesis).
    - ``messages``: the whole conversation, system prompt first.
    - ``grounding``: None until :meth:`AgentLoop.ground` scores the answer.
    - ``probability``: the calibrated chance that the answer is right, when the loop has an
      evaluator (the offline loop does); ``target_precision`` the chance it had to reach;
      ``gaps``: the evidence behind a run that is not :attr:`confident` (parts found and not
      found, the nearest misses, the searches), else None.
    - ``llm_calls``: every model call of the run in order (controller turns, answerer,
      synthesis): role, reply bound, finish reason, tokens, and what fitting the conversation
      to the model's context window left out.
    """

    query: str = Field(validation_alias=AliasChoices("query", "question"))
    answer: str | None = None
    stop_reason: StopReason
    iterations: int = Field(default=0, ge=0)
    tool_history: list[ToolHistoryEntry] = Field(default_factory=list)
    chunks: list[Chunk] = Field(default_factory=list)
    shown_chunks: list[Chunk] = Field(default_factory=list)
    error: str | None = None
    messages: list[Message] = Field(default_factory=list)
    grounding: Grounding | None = None
    budget_used: BudgetSpend = Field(default_factory=BudgetSpend)
    usage: Usage | None = None
    run_id: str = ""
    llm_calls: list[LLMCall] = Field(default_factory=list)
    probability: float | None = Field(default=None, ge=0.0, le=1.0)
    target_precision: float | None = Field(default=None, ge=0.0, le=1.0)
    gaps: EvidenceGaps | None = None

    @property
    def confident(self) -> bool:
        """Whether the run stands by its answer: it answered and, when the loop judges its
        answers against a target precision, the answer's chance of being right reaches it."""
        if self.stop_reason != StopReason.ANSWERED:
            return False
        target, chance = self.target_precision, self.probability
        return target is None or chance is None or chance >= target

    @property
    def terminated_by(self) -> StopReason:
        """Arcana's name for :attr:`stop_reason`."""
        return self.stop_reason

    @property
    def question(self) -> str:
        """Arcana's name for :attr:`query`."""
        return self.query

    @property
    def trace(self) -> list[ToolHistoryEntry]:
        """The run's steps in order, as ``trace`` is on the other engines' results: here the
        tool calls (:attr:`tool_history`)."""
        return self.tool_history

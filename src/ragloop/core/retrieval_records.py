"""Records of the budgeted retrieval loop (seeds 003 and 004): what understanders return, what a
refiner sees, the per-iteration record and the result.

The engine (``ragloop.engines.retrieval``) and the components it takes (understanders, routers,
refiners, caches, cost estimators) share them, so they live on the bottom floor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, Field, computed_field

from ragloop.core.budget import BudgetSpend
from ragloop.core.limits import LLMCall
from ragloop.core.records import Chunk, StopReason


class QueryShape(StrEnum):
    """What kind of search a query wants: exact terms (keyword), meaning (semantic), or both."""

    KEYWORD = "keyword"
    SEMANTIC = "semantic"
    HYBRID = "hybrid"


class UnderstoodQuery(BaseModel):
    """A query after understanding: the rewrite to search with, its parts, its shape.

    ``sub_queries`` holds the parts of a multi-part question (empty when it has one part);
    ``hyde`` a hypothetical answer passage whose embedding stands in for the query's in vector
    search (None unless a model wrote one). ``by_model`` is True when a model did the work, so
    a cost estimator knows there is something to charge. ``reason`` says how it was decided.
    """

    query: str
    rewritten: str
    sub_queries: list[str] = Field(default_factory=list)
    shape: QueryShape = QueryShape.HYBRID
    hyde: str | None = None
    reason: str = ""
    by_model: bool = False

    @property
    def searches(self) -> list[str]:
        """The texts to search: the sub-queries, or else the rewritten query."""
        return list(self.sub_queries) or [self.rewritten]


class CacheStats(BaseModel):
    """Embedding-cache lookups: hits, misses and the hit rate (0.0 before any lookup)."""

    hits: int = Field(default=0, ge=0)
    misses: int = Field(default=0, ge=0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __add__(self, other: CacheStats) -> CacheStats:
        return CacheStats(hits=self.hits + other.hits, misses=self.misses + other.misses)

    def __str__(self) -> str:
        return f"hits={self.hits} misses={self.misses} rate={self.rate:.2f}"


class RetrievalIteration(BaseModel):
    """One iteration of a :class:`~ragloop.RetrievalLoop` run.

    - ``index``: 0-based; ``query``: the iteration's queries joined with ``" | "``;
    - ``route``: the search route used (``bm25``, ``dense``, ``hybrid``, or the retriever's own);
    - ``results_n``: distinct chunks retrieved; ``new_chunks_n``: those no earlier iteration had;
    - ``best_score``: the highest score retrieved (0.0 when nothing came back);
    - ``plan_reused``: the router, asked about this iteration's query, picked the route the
      previous iteration used (the earlier plan still fits); never on iteration 0;
    - ``sticky``: the route was held from iteration 0 (``allow_route_switch=False``), not asked
      for; never on iteration 0;
    - ``cache_hits`` / ``cache_misses``: embedding-cache lookups of this iteration;
    - ``elapsed_ms``: the iteration's wall-clock time.
    """

    index: int = Field(ge=0)
    query: str
    route: str
    results_n: int = Field(ge=0)
    new_chunks_n: int = Field(ge=0)
    best_score: float = Field(ge=0.0, le=1.0)
    plan_reused: bool
    sticky: bool
    cache_hits: int = Field(ge=0)
    cache_misses: int = Field(ge=0)
    elapsed_ms: float = Field(ge=0.0)


def _share_of_later(iterations: Sequence[RetrievalIteration], flag: str) -> float:
    later = iterations[1:]
    return sum(bool(getattr(it, flag)) for it in later) / len(later) if later else 0.0


class RetrievalResult(BaseModel):
    """The outcome of a :class:`~ragloop.RetrievalLoop` run: evidence, not an answer.

    ``chunks`` holds every chunk gathered, deduplicated by id and ranked best first, so
    ``chunks[:k]`` is the loop's answer at k: a chunk's rank is its best position in any search
    of the run plus half a place per iteration before that search (evidence further from the
    question ranks a little lower), earlier discovery first on ties. ``cache_stats`` counts
    this run's embedding-cache lookups; ``budget_used`` what the run spent (tokens include the
    cost estimator's estimates); ``error`` the message of the failure that ended an
    ``on_error="stop"`` run; ``llm_calls`` the model calls of its components (an LLM
    understander's), each with its reply bound and finish reason.
    """

    query: str
    stop_reason: StopReason
    iterations: list[RetrievalIteration] = Field(default_factory=list)
    chunks: list[Chunk] = Field(default_factory=list)
    budget_used: BudgetSpend = Field(default_factory=BudgetSpend)
    cache_stats: CacheStats = Field(default_factory=CacheStats)
    run_id: str = ""
    error: str | None = None
    llm_calls: list[LLMCall] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def plan_reuse_rate(self) -> float:
        """Share of the iterations after the first whose earlier route plan still fitted."""
        return _share_of_later(self.iterations, "plan_reused")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sticky_route_rate(self) -> float:
        """Share of the iterations after the first whose route was held from iteration 0."""
        return _share_of_later(self.iterations, "sticky")


@dataclass(frozen=True)
class RefineContext:
    """What a :class:`~ragloop.QueryRefiner` sees after an iteration.

    - ``original``: the question the run started with; ``index``: the iteration just finished;
    - ``queries``: that iteration's queries; ``history``: every iteration so far, that one
      included;
    - ``last_chunks``: what that iteration retrieved, best first; ``new_chunks``: those of them
      no earlier iteration had; ``chunks``: everything gathered so far, ranked;
    - ``tried``: every query sent so far, normalised (``components.text.normalize_query``);
    - ``retriever``: the loop's retriever (a refiner may use what it offers, such as a
      knowledge base's link graph).
    """

    original: str
    index: int
    queries: list[str]
    history: list[RetrievalIteration]
    last_chunks: list[Chunk]
    new_chunks: list[Chunk]
    chunks: list[Chunk]
    tried: frozenset[str] = field(default_factory=frozenset)
    retriever: object = None

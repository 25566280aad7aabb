"""Records of the budgeted retrieval loop (seeds 003 and 004): what understanders return, what a
refiner sees, the per-iteration record and the result.

The engine (``ragloop.engines.retrieval``) and the components it takes (understanders, routers,
refiners, caches, cost estimators) share them, so they live on the bottom floor.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, SupportsIndex, overload

from pydantic import BaseModel, Field, ValidationError, computed_field, model_validator

from ragloop.core.budget import BudgetSpend
from ragloop.core.errors import ComponentError
from ragloop.core.jsonparse import lenient_enum
from ragloop.core.limits import LLMCall
from ragloop.core.records import Chunk, StopReason, Usage


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

    @classmethod
    def of(cls, understood: object, query: str) -> UnderstoodQuery:
        """An understanding of ``query`` from any object with the fields above (seed 004's
        ``UnderstoodQueryLike`` is a protocol: a dataclass, a mapping or another package's
        model will do). ``rewritten`` defaults to the query, ``shape`` may be a
        :class:`QueryShape`, its value or name, or another enum with such a value or name;
        the other fields keep their defaults when absent."""
        if isinstance(understood, UnderstoodQuery):
            return understood
        read = understood.get if isinstance(understood, dict) else _attribute(understood)
        shape = read("shape", None)
        shape = getattr(shape, "value", shape) if shape is not None else QueryShape.HYBRID
        if isinstance(shape, str):
            shape = lenient_enum(QueryShape)(shape)
        fields = {
            "query": read("query", None) or query,
            "rewritten": read("rewritten", None) or query,
            "sub_queries": list(read("sub_queries", None) or []),
            "shape": shape,
            "hyde": read("hyde", None),
            "reason": read("reason", None) or "",
            "by_model": bool(read("by_model", False)),
        }
        try:
            return cls.model_validate(fields)
        except ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise ComponentError(
                f"understander returned {type(understood).__name__} whose {where} is unusable "
                f"({problem['msg']}); expected the fields of ragloop.UnderstoodQuery"
            ) from None


def _attribute(value: object) -> Callable[[str, Any], Any]:
    return lambda name, default: getattr(value, name, default)


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


class RouteDecision(BaseModel):
    """How an iteration chose its search (seed 004's decision): the ``shape`` understood in its
    first query and, in ``reason``, how that was decided and how the route followed from it."""

    shape: QueryShape = QueryShape.HYBRID
    reason: str = ""


class RetrievalIteration(BaseModel):
    """One iteration of a :class:`~ragloop.RetrievalLoop` run.

    - ``index``: 0-based; ``query``: the iteration's queries joined with ``" | "``;
    - ``chunks``: what the iteration retrieved (and the link graph added), best first, with
      their text, source, metadata and score; ``decision``: its :class:`RouteDecision`;
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
    chunks: list[Chunk] = Field(default_factory=list)
    decision: RouteDecision = Field(default_factory=RouteDecision)


def _share_of_later(iterations: Sequence[RetrievalIteration], flag: str) -> float:
    later = iterations[1:]
    return sum(bool(getattr(it, flag)) for it in later) / len(later) if later else 0.0


class IterationCount(int):
    """``RetrievalResult.iterations``: the number of iterations, as on every engine's result.

    In earlier releases it was the list of iteration records (seed 004's ``iterations``), which is
    now ``trace``. So that code written for the list keeps working, indexing, iterating and
    ``len()`` still read the records, with a ``DeprecationWarning``.
    """

    _records: list[RetrievalIteration]

    def __new__(cls, records: list[RetrievalIteration]) -> IterationCount:
        count = super().__new__(cls, len(records))
        count._records = records
        return count

    def _list(self) -> list[RetrievalIteration]:
        warnings.warn(
            "RetrievalResult.iterations is the number of iterations; the iteration records "
            "are RetrievalResult.trace",
            DeprecationWarning,
            stacklevel=3,
        )
        return self._records

    @overload
    def __getitem__(self, index: SupportsIndex) -> RetrievalIteration: ...
    @overload
    def __getitem__(self, index: slice) -> list[RetrievalIteration]: ...
    def __getitem__(
        self, index: SupportsIndex | slice
    ) -> RetrievalIteration | list[RetrievalIteration]:
        return self._list()[index]

    def __iter__(self) -> Iterator[RetrievalIteration]:
        return iter(self._list())

    def __len__(self) -> int:
        return len(self._list())


class RetrievalResult(BaseModel):
    """The outcome of a :class:`~ragloop.RetrievalLoop` run: evidence, not an answer.

    ``chunks`` holds every chunk gathered, deduplicated by id and ranked best first, so
    ``chunks[:k]`` is the loop's answer at k: a chunk's rank is its best position in any search
    of the run plus half a place per iteration before that search (evidence further from the
    question ranks a little lower), earlier discovery first on ties. ``cache_stats`` counts
    this run's embedding-cache lookups; ``budget_used`` what the run spent (tokens include the
    cost estimator's estimates); ``error`` the message of the failure that ended an
    ``on_error="stop"`` run; ``llm_calls`` the model calls of its components (an LLM
    understander's), each with its reply bound and finish reason. ``iterations`` counts the
    iterations and ``trace`` holds their records, as on the other engines' results (see
    :class:`IterationCount` for the old list).
    """

    query: str
    stop_reason: StopReason
    iterations: int = Field(default=0, ge=0)
    trace: list[RetrievalIteration] = Field(default_factory=list)
    chunks: list[Chunk] = Field(default_factory=list)
    budget_used: BudgetSpend = Field(default_factory=BudgetSpend)
    usage: Usage | None = None
    cache_stats: CacheStats = Field(default_factory=CacheStats)
    run_id: str = ""
    error: str | None = None
    llm_calls: list[LLMCall] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _records_given_as_iterations(cls, data: Any) -> Any:
        # a result saved by an earlier release holds its records in "iterations"
        if isinstance(data, dict) and isinstance(data.get("iterations"), list):
            data = {**data, "trace": data.get("trace") or data["iterations"]}
            del data["iterations"]
        return data

    @model_validator(mode="after")
    def _count(self) -> RetrievalResult:
        self.iterations = IterationCount(self.trace)
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def plan_reuse_rate(self) -> float:
        """Share of the iterations after the first whose earlier route plan still fitted."""
        return _share_of_later(self.trace, "plan_reused")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sticky_route_rate(self) -> float:
        """Share of the iterations after the first whose route was held from iteration 0."""
        return _share_of_later(self.trace, "sticky")


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

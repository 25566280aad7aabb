"""RetrievalLoop: budgeted iterative retrieval that gathers evidence and hands it on (seeds 003
and 004). It never generates.

Each iteration understands its queries (rewrite, parts, shape, HyDE), routes them to a search
mode, embeds through the shared embedding cache when the route needs vectors, retrieves, and
adds the new chunks to the run's ranked evidence. Then the next queries come from, in order:
the caller's ``sub_queries``, ``refine_query`` (per run), the loop's ``refiner``; with none of
them the last queries run again (the caches make that cheap, diminishing returns ends it).

Stop rules, in seed 004's order:

- at the top of each iteration: any budget dimension exhausted (``None`` uncapped, ``0``
  exhausted) -> ``budget_tokens`` / ``budget_dollars`` / ``budget_wall_ms`` / ``budget_iter``;
- at its end: ``should_continue(history)`` False -> ``caller_stop``; fewer new chunks than
  ``min_new_chunks_per_iter`` -> ``diminishing_returns`` (never on iteration 0; 0 disables it);
  with ``improvement_threshold`` set, a best score less than that above the best so far (0.0
  before iteration 0, as in seed 003's code) -> ``no_improvement``; ``refine_query`` returning
  None -> ``caller_stop``, the loop's refiner returning None -> ``no_new_queries``; the last
  iteration -> ``max_iterations`` (the refinement is not asked after it: its query could not be
  used).

Telemetry (:mod:`ragloop.observability`): a run span with seed 004's attributes, an ``iteration``
event (and structured log record) per iteration, a span per retrieval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict, Unpack

from ragloop.core.budget import Budget, check_budget
from ragloop.core.calls import GenerateFn, has_method, run_sync, sync_calls_in_threads
from ragloop.core.errors import ConfigError, check_query
from ragloop.core.limits import with_llm_calls
from ragloop.core.protocols import (
    ChatModel,
    CostEstimator,
    EmbeddingCache,
    QueryRefiner,
    QueryUnderstander,
    Retriever,
    Router,
)
from ragloop.core.retrieval_records import RetrievalResult
from ragloop.engines.retrieval_run import RefineQuery, Run, ShouldContinue
from ragloop.observability import otel
from ragloop.observability.run import RunTelemetry
from ragloop.observability.stream import RunStream, stream_run

if TYPE_CHECKING:
    from ragloop.retrieval.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever


def _count(value: object, name: str, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(name, f"must be an integer >= {minimum}, got {value!r}")


@dataclass
class RetrievalLoopConfig:
    """Settings of a :class:`RetrievalLoop`. Invalid values raise ``ValueError`` naming the field.

    - ``max_iterations``: iterations at most (>= 1);
    - ``min_new_chunks_per_iter``: an iteration after the first that adds fewer new chunks ends
      the run with ``diminishing_returns`` (0 disables the rule);
    - ``top_k``: chunks per search (>= 1);
    - ``improvement_threshold``: when set (in [0, 1]), an iteration whose best score is less than
      this above the best so far ends the run with ``no_improvement`` (seed 003);
    - ``allow_route_switch``: False (sticky) keeps iteration 0's route; True asks the router
      every iteration;
    - ``follow_links``: after each search, the chunks that the best this-many new chunks name
      (by title or heading, through the knowledge base's link graph) join the evidence, ranked
      as the top result of a next hop would be (0 disables it; needs a knowledge-base
      retriever or router, and keeps to its collections and filters);
    - ``on_error``: ``"raise"`` lets a component's exception propagate (with a note naming the
      step); ``"stop"`` ends the run with ``StopReason.ERROR``, the evidence gathered so far and
      the message in ``RetrievalResult.error``;
    - ``direct_first``: True ranks the evidence the first iteration's searches found first, in
      their order: a later search or a link can move one of those chunks up (to the rank it
      would give a new chunk), and puts the chunks only it found after them, so the evidence
      never ranks a chunk of the question's own results lower than its search did because a
      hop went astray; a chunk those searches did not find passes them only when a later
      search and a link both found it (the offline loops use it);
    - ``budget``: the :class:`~ragloop.Budget` of every run that is not given its own.
    """

    max_iterations: int = 5
    min_new_chunks_per_iter: int = 2
    top_k: int = 10
    improvement_threshold: float | None = None
    allow_route_switch: bool = False
    follow_links: int = 0
    on_error: Literal["raise", "stop"] = "raise"
    direct_first: bool = False
    budget: Budget | None = None

    def __post_init__(self) -> None:
        _count(self.max_iterations, "max_iterations", 1)
        _count(self.min_new_chunks_per_iter, "min_new_chunks_per_iter", 0)
        _count(self.top_k, "top_k", 1)
        _count(self.follow_links, "follow_links", 0)
        threshold = self.improvement_threshold
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or math.isnan(threshold)
            or not 0.0 <= threshold <= 1.0
        ):
            raise ConfigError(
                "improvement_threshold", f"must be None or a number in [0, 1], got {threshold!r}"
            )
        for flag in ("allow_route_switch", "direct_first"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(flag, "must be True or False")
        if self.on_error not in ("raise", "stop"):
            raise ConfigError("on_error", f"must be 'raise' or 'stop', got {self.on_error!r}")
        check_budget(self.budget)


class RetrievalLoopOptions(TypedDict, total=False):
    """The keyword options of :meth:`RetrievalLoop.offline`: the fields of
    :class:`RetrievalLoopConfig` (or a whole ``config=``), a ``glossary`` for the understander,
    and ``model=`` (an LLM understander instead of the heuristic one). An unknown name is a
    ``ConfigError``."""

    model: ChatModel | GenerateFn | None
    glossary: Mapping[str, str | Sequence[str]] | None
    config: RetrievalLoopConfig
    max_iterations: int
    min_new_chunks_per_iter: int
    top_k: int
    improvement_threshold: float | None
    allow_route_switch: bool
    follow_links: int
    on_error: Literal["raise", "stop"]
    direct_first: bool
    budget: Budget | None


_COMPONENTS = (
    ("understander", "understand"),
    ("router", "route"),
    ("refiner", "refine"),
    ("embedding_cache", "lookup"),
    ("cost_estimator", "estimate"),
)


class RetrievalLoop:
    """Budgeted iterative retrieval. See the module docstring for its rules and
    ``docs/retrieval-loop.md`` for a guide. Components may be sync or async. A loop holds no
    per-run state except its embedding cache, which its runs share; one instance may serve
    concurrent runs.

    ``retriever`` is searched directly unless a ``router`` is given (a router searches by the
    route it picks, such as :class:`~ragloop.RetrievalRouter` over a knowledge base).
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        config: RetrievalLoopConfig | None = None,
        understander: QueryUnderstander | None = None,
        router: Router | None = None,
        refiner: QueryRefiner | None = None,
        embedding_cache: EmbeddingCache | None = None,
        cost_estimator: CostEstimator | None = None,
    ) -> None:
        if not has_method(retriever, "retrieve"):
            raise ConfigError(
                "retriever",
                f"retriever must have a retrieve() or aretrieve() method; "
                f"got {type(retriever).__name__}",
            )
        if config is not None and not isinstance(config, RetrievalLoopConfig):
            raise ConfigError(
                "config", f"must be a RetrievalLoopConfig, got {type(config).__name__}"
            )
        given = {
            "understander": understander,
            "router": router,
            "refiner": refiner,
            "embedding_cache": embedding_cache,
            "cost_estimator": cost_estimator,
        }
        for role, name in _COMPONENTS:
            component = given[role]
            if component is not None and not has_method(component, name):
                raise ConfigError(
                    role, f"{role} must have a {name}() method; got {type(component).__name__}"
                )
        self.retriever = retriever
        self.config = config or RetrievalLoopConfig()
        self.understander = understander
        self.router = router
        self.refiner = refiner
        self.embedding_cache = embedding_cache
        self.cost_estimator = cost_estimator

    @classmethod
    def offline(
        cls, kb: KnowledgeBase | KnowledgeBaseRetriever, **options: Unpack[RetrievalLoopOptions]
    ) -> RetrievalLoop:
        """The loop wired with the best offline components for ``kb`` (see
        :func:`ragloop.offline_retrieval.offline_retrieval_loop`); ``options``
        (:class:`RetrievalLoopOptions`) hold :class:`RetrievalLoopConfig` fields, ``glossary=``
        and ``model=``."""
        # the wiring lives a floor up; imported here so engines stay free of it until asked
        from ragloop.offline_retrieval import offline_retrieval_loop

        return offline_retrieval_loop(kb, **options)

    def run(
        self,
        query: str,
        *,
        budget: Budget | None = None,
        refine_query: RefineQuery | None = None,
        should_continue: ShouldContinue | None = None,
        sub_queries: Sequence[str] | None = None,
    ) -> RetrievalResult:
        """Run the loop to a stop. Blocks; sync components run inline.

        ``refine_query(original, history, iter_idx)`` writes the next query after iteration
        ``iter_idx`` (history holds every iteration so far, that one included; None stops);
        ``should_continue(history)`` False stops (None is no opinion); both may be async, and
        an exception in either is raised as :class:`~ragloop.RetrievalLoopError`.
        ``sub_queries`` are the queries of iterations 1, 2, ... before any refinement.
        ``budget`` replaces the config's for this run.
        """
        return run_sync(
            lambda: self._run(
                query, budget, refine_query, should_continue, sub_queries, in_threads=False
            )
        )

    async def arun(
        self,
        query: str,
        *,
        budget: Budget | None = None,
        refine_query: RefineQuery | None = None,
        should_continue: ShouldContinue | None = None,
        sub_queries: Sequence[str] | None = None,
    ) -> RetrievalResult:
        """Async :meth:`run`: sync components run in worker threads, searches concurrently."""
        return await self._run(
            query, budget, refine_query, should_continue, sub_queries, in_threads=True
        )

    def astream(
        self,
        query: str,
        *,
        budget: Budget | None = None,
        refine_query: RefineQuery | None = None,
        should_continue: ShouldContinue | None = None,
        sub_queries: Sequence[str] | None = None,
    ) -> RunStream[RetrievalResult]:
        """:meth:`arun` as a stream of its events (``async for event in loop.astream(q)``):
        each search (its route and the chunks it returned), each iteration and the queries the
        next one will search, then ``run_finished``; the result is the stream's ``result``.
        Closing the stream early cancels the run. See ``docs/streaming.md``."""
        return stream_run(
            lambda: self._run(
                query, budget, refine_query, should_continue, sub_queries, in_threads=True
            )
        )

    async def _run(
        self,
        query: str,
        budget: Budget | None,
        refine_query: RefineQuery | None,
        should_continue: ShouldContinue | None,
        sub_queries: Sequence[str] | None,
        *,
        in_threads: bool,
    ) -> RetrievalResult:
        check_query(query)
        check_budget(budget)
        budget = self.config.budget if budget is None else budget
        for name, fn in (("refine_query", refine_query), ("should_continue", should_continue)):
            if fn is not None and not callable(fn):
                raise ConfigError(name, "must be callable or None")
        extra = [q for q in (sub_queries or []) if isinstance(q, str) and q.strip()]
        if sub_queries is not None and (
            isinstance(sub_queries, str) or len(extra) != len(sub_queries)
        ):
            raise ConfigError("sub_queries", "must be a list of non-empty strings")
        telemetry = RunTelemetry("retrieval", span_kind="CHAIN")
        run = Run(self, query, budget, telemetry, refine_query, should_continue, extra)
        cfg = self.config
        started = telemetry.active(
            attributes={
                "max_iterations": cfg.max_iterations,
                "top_k": cfg.top_k,
                "min_new_chunks_per_iter": cfg.min_new_chunks_per_iter,
                "improvement_threshold": cfg.improvement_threshold,
                "allow_route_switch": cfg.allow_route_switch,
            },
            content={"question": query},
        )
        with sync_calls_in_threads(in_threads), run.tracker.active(), started:
            telemetry.span.set(
                otel.retrieval_loop_settings(
                    max_iterations=cfg.max_iterations, allow_route_switch=cfg.allow_route_switch
                )
            )
            return await with_llm_calls(run.execute())

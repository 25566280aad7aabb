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

from typing import TYPE_CHECKING, Any, Unpack

from ragloop.core.budget import Budget
from ragloop.core.calls import has_method, run_sync
from ragloop.core.errors import ConfigError
from ragloop.core.protocols import (
    CostEstimator,
    EmbeddingCache,
    QueryRefiner,
    QueryUnderstander,
    Retriever,
    Router,
)
from ragloop.core.records.retrieval import RetrievalResult
from ragloop.engines._run import Engine
from ragloop.engines.options import (
    RetrievalLoopConfig,
    RetrievalLoopOptions,
    RetrievalRunOptions,
)
from ragloop.engines.retrieval_run import Run, RunHooks
from ragloop.observability.run import RunTelemetry
from ragloop.observability.stream import RunStream, stream_run

if TYPE_CHECKING:
    from ragloop.kb.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever

__all__ = ["RetrievalLoop", "RetrievalLoopConfig", "RetrievalLoopOptions"]


_COMPONENTS = (
    ("understander", "understand"),
    ("router", "route"),
    ("refiner", "refine"),
    ("embedding_cache", "lookup"),
    ("cost_estimator", "estimate"),
)


class RetrievalLoop(Engine[RetrievalResult, RetrievalRunOptions]):
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
        """The loop wired with the best offline components for multi-hop questions over
        ``kb`` (a knowledge base or one of its retrievers): the heuristic understander, hybrid
        routing, the entity-bridge refiner along the link graph, two iterations with the
        question's own results first (see :mod:`ragloop.engines.defaults.retrieval` for each
        choice and its measurement). ``options`` (:class:`RetrievalLoopOptions`) hold
        :class:`RetrievalLoopConfig` fields, which override those defaults, or a whole
        ``config=``, and ``glossary=`` and ``model=`` for the understander; an unknown name is
        a :class:`~ragloop.ConfigError`."""
        # imported when asked: the defaults bring the knowledge base and the components
        from ragloop.engines.defaults.retrieval import retrieval_parts

        parts = retrieval_parts(kb, **options)
        return cls(
            parts.retriever,
            config=parts.config,
            understander=parts.understander,
            router=parts.router,
            refiner=parts.refiner,
            embedding_cache=parts.embedding_cache,
            cost_estimator=parts.cost_estimator,
        )

    def run(
        self,
        query: str,
        *,
        budget: Budget | None = None,
        **hooks: Unpack[RetrievalRunOptions],
    ) -> RetrievalResult:
        """Run the loop to a stop. Blocks; sync components run inline.

        ``refine_query(original, history, iter_idx)`` writes the next query after iteration
        ``iter_idx`` (history holds every iteration so far, that one included; None stops);
        ``should_continue(history)`` False stops (None is no opinion); both may be async, and
        an exception in either is raised as :class:`~ragloop.RetrievalLoopError`.
        ``sub_queries`` are the queries of iterations 1, 2, ... before any refinement.
        ``budget`` replaces the config's for this run.
        """
        return run_sync(lambda: self._run(query, budget, hooks, in_threads=False))

    async def arun(
        self, query: str, *, budget: Budget | None = None, **hooks: Unpack[RetrievalRunOptions]
    ) -> RetrievalResult:
        """Async :meth:`run`: sync components run in worker threads, searches concurrently."""
        return await self._run(query, budget, hooks, in_threads=True)

    def astream(
        self, query: str, *, budget: Budget | None = None, **hooks: Unpack[RetrievalRunOptions]
    ) -> RunStream[RetrievalResult]:
        """:meth:`arun` as a stream of its events (``async for event in loop.astream(q)``):
        each search (its route and the chunks it returned), each iteration and the queries the
        next one will search, then ``run_finished``; the result is the stream's ``result``.
        Closing the stream early cancels the run. See ``docs/streaming.md``."""
        return stream_run(lambda: self._run(query, budget, hooks, in_threads=True))

    async def _start(
        self, query: str, budget: Budget | None, given: RetrievalRunOptions | None
    ) -> Run:
        hooks = RunHooks.of(given)
        budget = self.config.budget if budget is None else budget
        return Run(self, query, budget, RunTelemetry("retrieval", span_kind="CHAIN"), hooks)

    def _settings(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "max_iterations": cfg.max_iterations,
            "top_k": cfg.top_k,
            "min_new_chunks_per_iter": cfg.min_new_chunks_per_iter,
            "improvement_threshold": cfg.improvement_threshold,
            "allow_route_switch": cfg.allow_route_switch,
        }

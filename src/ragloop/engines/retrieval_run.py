"""One RetrievalLoop run: its state and its steps (understand, route, embed, search, gather,
refine), its stop checks and its telemetry. :mod:`ragloop.engines.retrieval` holds the public
class and the rules."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ragloop.core.budget import Budget, BudgetTracker
from ragloop.core.calls import call, method
from ragloop.core.errors import (
    BudgetExceeded,
    ComponentError,
    ConfigError,
    RetrievalLoopError,
    check_options,
)
from ragloop.core.protocols import (
    CostEstimator,
    EmbeddingCache,
    QueryRefiner,
    QueryUnderstander,
    Retriever,
    Router,
)
from ragloop.core.records import Chunk, StopReason, Usage
from ragloop.core.records.retrieval import (
    CacheStats,
    RefineContext,
    RetrievalIteration,
    RetrievalResult,
    RouteDecision,
    UnderstoodQuery,
)
from ragloop.core.text import normalize_query
from ragloop.engines._run import finish
from ragloop.engines.options import (
    RefineQuery,
    RetrievalLoopConfig,
    RetrievalRunOptions,
    ShouldContinue,
)
from ragloop.kb.embedding.embedders import embed_queries
from ragloop.observability import otel
from ragloop.observability.events import EventKind, chunk_refs
from ragloop.observability.run import RunTelemetry

T = TypeVar("T")
# Evidence found further from the question is less sure to matter (each hop can go astray): a
# chunk found at position p of a search in iteration i ranks as p + i / 2, so the top chunk of
# a second hop goes between the question's first and second, a third hop's after its second.
# Measured on HotpotQA against plain best-position ranking: see BENCHMARKS.md.
LATER_ITERATION_PENALTY = 0.5


class RetrievalSetup(Protocol):
    """What a run reads of its loop (a :class:`~ragloop.RetrievalLoop`'s attributes)."""

    retriever: Retriever
    config: RetrievalLoopConfig
    understander: QueryUnderstander | None
    router: Router | None
    refiner: QueryRefiner | None
    embedding_cache: EmbeddingCache | None
    cost_estimator: CostEstimator | None


@dataclass
class RunHooks:
    """What a caller gave one run besides query and budget, checked (see
    :meth:`RetrievalLoop.run <ragloop.RetrievalLoop.run>`)."""

    refine_query: RefineQuery | None
    should_continue: ShouldContinue | None
    sub_queries: list[str]

    @classmethod
    def of(cls, options: RetrievalRunOptions | None) -> RunHooks:
        """The hooks in ``options``; a :class:`~ragloop.ConfigError` for an unknown name, a
        callback that is not callable or ``sub_queries`` that are not non-empty strings."""
        given: RetrievalRunOptions = options or {}
        check_options(given, RetrievalRunOptions.__annotations__, owner="RetrievalLoop.run")
        refine_query = given.get("refine_query")
        should_continue = given.get("should_continue")
        for name, fn in (("refine_query", refine_query), ("should_continue", should_continue)):
            if fn is not None and not callable(fn):
                raise ConfigError(name, "must be callable or None")
        sub_queries = given.get("sub_queries")
        queries = [q for q in (sub_queries or []) if isinstance(q, str) and q.strip()]
        if sub_queries is not None and (
            isinstance(sub_queries, str) or len(queries) != len(sub_queries)
        ):
            raise ConfigError("sub_queries", "must be a list of non-empty strings")
        return cls(refine_query, should_continue, queries)


@dataclass
class _Search:
    text: str  # what keyword search reads
    vector_text: str  # what is embedded for vector search (a HyDE passage, else the text)
    vector: list[float] | None = None


class Run:
    """The state of one run: history, ranked evidence, tried queries, budget tracker."""

    def __init__(
        self,
        loop: RetrievalSetup,
        query: str,
        budget: Budget | None,
        telemetry: RunTelemetry,
        hooks: RunHooks,
    ) -> None:
        self.loop = loop
        self.config = loop.config
        self.query = query
        self.telemetry = telemetry
        self.refine_query = hooks.refine_query
        self.should_continue = hooks.should_continue
        self.sub_queries = hooks.sub_queries
        self.tracker = BudgetTracker(budget)
        self.history: list[RetrievalIteration] = []
        self.found: dict[str, Chunk] = {}
        self.places: dict[str, dict[str, float]] = {}  # id -> {route that found it: best rank}
        self.tried: set[str] = set()
        self.first_route: str | None = None
        self.cache = CacheStats()
        self.plans: list[UnderstoodQuery] = []
        self.step = "understander"
        self.index = 0  # the iteration in progress

    async def execute(self) -> RetrievalResult:
        self.telemetry.span.set(
            otel.retrieval_loop_settings(
                max_iterations=self.config.max_iterations,
                allow_route_switch=self.config.allow_route_switch,
            )
        )
        queries = [self.query]
        best_so_far = 0.0
        last = self.config.max_iterations - 1
        for index in range(self.config.max_iterations):
            spent = self.tracker.exhausted(starting_iteration=True)
            if spent is not None:
                return self._finish(spent)
            self.tracker.count_iteration()
            self.index = index
            try:
                it, last_chunks, new_chunks = await self._iteration(index, queries)
            except BudgetExceeded as stop:
                return self._finish(stop.reason)
            except Exception as error:
                if self.config.on_error == "stop":
                    message = (
                        f"{self.step} failed in iteration {index}: {type(error).__name__}: {error}"
                    )
                    self.telemetry.failed(error)
                    return self._finish(StopReason.ERROR, error=message)
                error.add_note(f"ragloop: raised by the {self.step} in iteration {index}")
                raise
            self.history.append(it)
            self._iteration_event(it, queries)
            ended = await self._end_checks(it, best_so_far)
            if ended is not None:
                return self._finish(ended)
            best_so_far = max(best_so_far, it.best_score)
            if index == last:
                break
            try:
                refined = await self._next_queries(index, queries, last_chunks, new_chunks)
            except BudgetExceeded as stop:
                return self._finish(stop.reason)
            except RetrievalLoopError:
                raise  # a caller callback's failure is the caller's to handle
            except Exception as error:
                if self.config.on_error == "raise":
                    raise
                message = f"refiner failed after iteration {index}: {type(error).__name__}: {error}"
                self.telemetry.failed(error)
                return self._finish(StopReason.ERROR, error=message)
            self._reformulation_event(index, refined)
            if refined is None:  # the caller's refine_query, else the loop's refiner, said stop
                by_caller = self.refine_query is not None
                return self._finish(
                    StopReason.CALLER_STOP if by_caller else StopReason.NO_NEW_QUERIES
                )
            queries = refined
        return self._finish(StopReason.MAX_ITERATIONS)

    async def _end_checks(self, it: RetrievalIteration, best_so_far: float) -> StopReason | None:
        cfg = self.config
        if self.should_continue is not None:
            verdict = await self._callback("should_continue", self.should_continue, it.index)
            if verdict is not None and not verdict:  # None: a callback that forgot to return
                return StopReason.CALLER_STOP
        if it.index > 0 and it.new_chunks_n < cfg.min_new_chunks_per_iter:
            return StopReason.DIMINISHING_RETURNS
        threshold = cfg.improvement_threshold
        if threshold is not None and it.best_score - best_so_far < threshold:
            return StopReason.NO_IMPROVEMENT
        return None

    async def _callback(self, name: str, fn: Callable[..., Any], index: int) -> Any:
        args: tuple[Any, ...] = (list(self.history),)
        if name == "refine_query":
            args = (self.query, list(self.history), index)
        try:
            return await call(fn, *args)
        except Exception as error:
            raise RetrievalLoopError(
                f"{name} raised {type(error).__name__}: {error}", iteration=index
            ) from error

    # -- one iteration --------------------------------------------------------------------------
    async def _iteration(
        self, index: int, queries: list[str]
    ) -> tuple[RetrievalIteration, list[Chunk], list[Chunk]]:
        started = time.perf_counter()
        plans = await self._understand(queries)
        route, plan_reused, sticky, why = await self._route(index, plans[0])
        searches = _searches(plans)
        hits, misses = await self._embed(route, searches)
        self.step = "router" if self.loop.router is not None else "retriever"
        before = self.tracker.usage
        rankings = await self.tracker.bounded(_gather(*(self._search(route, s) for s in searches)))
        await self._estimate("retrieve", before, [s.text for s in searches])
        last_chunks = _interleave(rankings)
        new_chunks = [c for c in last_chunks if c.id not in self.found]
        self._gather(index, rankings)
        linked = await self._follow_links(index, new_chunks)
        new_chunks += linked
        retrieved_ids = {c.id for c in last_chunks}
        retrieved = last_chunks + [c for c in linked if c.id not in retrieved_ids]
        self.tried.update(normalize_query(q) for q in queries)
        self.tried.update(normalize_query(s.text) for s in searches)
        self.cache = self.cache + CacheStats(hits=hits, misses=misses)
        it = RetrievalIteration(
            index=index,
            query=" | ".join(queries),
            route=route,
            results_n=len(last_chunks),
            new_chunks_n=len(new_chunks),
            best_score=max((c.score for c in last_chunks), default=0.0),
            plan_reused=plan_reused,
            sticky=sticky,
            cache_hits=hits,
            cache_misses=misses,
            elapsed_ms=round((time.perf_counter() - started) * 1000.0, 3),
            chunks=retrieved,
            decision=RouteDecision(shape=plans[0].shape, reason=why),
        )
        self.plans = plans
        return it, last_chunks, new_chunks

    async def _understand(self, queries: list[str]) -> list[UnderstoodQuery]:
        understander = self.loop.understander
        if understander is None:
            return [UnderstoodQuery(query=q, rewritten=q, reason="as given") for q in queries]
        self.step = "understander"
        understand = method(understander, "understand", "understander")
        before = self.tracker.usage
        given = await self.tracker.bounded(_gather(*(call(understand, q) for q in queries)))
        plans = [UnderstoodQuery.of(plan, q) for plan, q in zip(given, queries, strict=True)]
        by_model = [p for p in plans if p.by_model]
        await self._estimate(
            "understand",
            before,
            [p.query for p in by_model],
            [t for p in by_model for t in (p.rewritten, *p.sub_queries, p.hyde or "") if t],
        )
        return plans

    async def _route(self, index: int, plan: UnderstoodQuery) -> tuple[str, bool, bool, str]:
        """(route, plan_reused, sticky, reason) of an iteration."""
        router = self.loop.router
        self.step = "router"
        understood = f"shape={plan.shape.value}" + (f" ({plan.reason})" if plan.reason else "")
        if router is None:
            fresh = str(getattr(self.loop.retriever, "mode", None) or "default")
            picked = f"the retriever searches by {fresh}"
        else:
            fresh = await call(method(router, "route", "router"), plan)
            if not isinstance(fresh, str) or not fresh:
                raise ComponentError(f"router returned {fresh!r}; expected a route name")
            picked = f"the router picked {fresh}"
        if index == 0 or self.first_route is None:
            self.first_route = fresh
            return fresh, False, False, f"{understood}; {picked}"
        sticky = not self.config.allow_route_switch
        route = self.first_route if sticky else fresh
        if sticky:
            picked += f"; {route} held from iteration 0 (sticky)"
        return route, fresh == self.history[-1].route, sticky, f"{understood}; {picked}"

    async def _embed(self, route: str, searches: list[_Search]) -> tuple[int, int]:
        """Fill each search's query vector when the route needs one: from the cache, else
        embedded (all misses in one call). Returns the cache (hits, misses)."""
        router = self.loop.router
        if router is None:
            return 0, 0
        self.step = "router"
        embedder = await call(method(router, "query_embedder", "router"), route)
        if embedder is None:
            return 0, 0
        cache = self.loop.embedding_cache
        model = str(getattr(embedder, "model_id", type(embedder).__name__))
        wanted: dict[str, list[_Search]] = {}
        for search in searches:
            wanted.setdefault(search.vector_text, []).append(search)
        vectors: dict[str, list[float]] = {}
        if cache is not None:
            self.step = "embedding cache"
            lookup = method(cache, "lookup", "embedding cache")
            for text in wanted:
                cached = await call(lookup, model, text)
                if cached is not None:
                    vectors[text] = list(cached)
        hits = len(vectors)
        missing = [text for text in wanted if text not in vectors]
        if missing:
            self.step = "embedder"
            before = self.tracker.usage
            made = await self.tracker.bounded(call(embed_queries, embedder, missing))
            await self._estimate("embed", before, missing)
            store = None if cache is None else method(cache, "store", "embedding cache")
            for text, vector in zip(missing, made, strict=True):
                vectors[text] = list(vector)
                if store is not None:
                    await call(store, model, text, vectors[text])
        for text, group in wanted.items():
            for search in group:
                search.vector = vectors[text]
        return hits, len(missing)

    async def _search(self, route: str, search: _Search) -> list[Chunk]:
        top_k = self.config.top_k
        with self.telemetry.retrieval(search.text, top_k=top_k, route=route) as span:
            if self.loop.router is not None:
                found = await call(
                    method(self.loop.router, "search", "router"),
                    search.text,
                    route=route,
                    top_k=top_k,
                    vector=search.vector,
                )
            else:
                retrieve = method(self.loop.retriever, "retrieve", "retriever")
                found = await call(retrieve, search.text, top_k=top_k)
            chunks = _chunks(found, "router" if self.loop.router is not None else "retriever")
            span.set(otel.retrieved(chunks))
        self.telemetry.event(
            EventKind.SEARCH,
            iteration=self.index,
            attributes={"top_k": top_k, "route": route, "chunks": chunk_refs(chunks)},
            content={"query": search.text},
        )
        return chunks

    def _gather(self, index: int, rankings: list[list[Chunk]]) -> None:
        """Add one iteration's rankings to the evidence. A chunk's rank is its best position in
        any search (scores of different queries do not compare), plus
        ``LATER_ITERATION_PENALTY`` places per iteration before the search; earlier discovery
        first on ties."""
        route = "question" if index == 0 else "search"
        for ranking in rankings:
            for position, chunk in enumerate(ranking):
                self._place(chunk, position + LATER_ITERATION_PENALTY * index, route)

    def _place(self, chunk: Chunk, rank: float, route: str) -> bool:
        """Record that ``route`` ("question", "search" or "link") found a chunk at ``rank``;
        True when the chunk is new to the evidence."""
        places = self.places.get(chunk.id)
        if places is None:
            self.found[chunk.id] = chunk  # in discovery order, which breaks ties in _ranked
            self.places[chunk.id] = {route: rank}
            return True
        places[route] = min(rank, places.get(route, rank))
        return False

    def _rank(self, chunk_id: str) -> float:
        """A chunk's rank: its best place. With ``direct_first``, a chunk the question's own
        searches did not find goes after their results, unless a later search and a link both
        found it (two hops agreeing, as a bridge passage is named and then searched for): a
        chunk only links name, however often, never passes the question's own results."""
        places = self.places[chunk_id]
        best = min(places.values())
        if self.config.direct_first and "question" not in places and len(places) < 2:
            best += self.config.top_k
        return best

    def _ranked(self) -> list[Chunk]:
        # sorted() is stable: on equal ranks, earlier discovery first
        return sorted(self.found.values(), key=lambda c: self._rank(c.id))

    async def _follow_links(self, index: int, new_chunks: list[Chunk]) -> list[Chunk]:
        """The chunks the best new chunks name, added to the evidence as a next hop's top
        results would be (``follow_links``); the retriever's scope applies."""
        count = self.config.follow_links
        owner = self.loop.router if self.loop.router is not None else self.loop.retriever
        kb = getattr(owner, "kb", None)
        linked_chunks = getattr(kb, "linked_chunks", None)
        if not count or not new_chunks or not callable(linked_chunks):
            return []
        self.step = "link graph"
        scope = getattr(owner, "retriever", owner)
        linked = await call(
            linked_chunks,
            [c.id for c in new_chunks[:count]],
            limit=count * 4,
            collection=getattr(scope, "collection", None),
            filters=getattr(scope, "filters", None),
        )
        rank = LATER_ITERATION_PENALTY * (index + 1)
        # a chunk found already, named by a better chunk, moves up
        return [c for c in _chunks(linked, "link graph") if self._place(c, rank, "link")]

    async def _estimate(
        self, stage: str, before: Usage | None, inputs: list[str], outputs: Sequence[str] = ()
    ) -> None:
        """Charge the cost estimator's figure for a stage no provider reported usage for."""
        estimator = self.loop.cost_estimator
        if estimator is None or not inputs or self.tracker.usage != before:
            return
        estimate = method(estimator, "estimate", "cost estimator")
        usage = await call(estimate, stage, inputs, list(outputs))
        if not isinstance(usage, Usage):
            raise ComponentError(
                f"cost estimator returned {type(usage).__name__}; expected ragloop.Usage"
            )
        if usage.total_tokens or usage.cost_usd:
            self.tracker.record(usage)

    # -- what to search next --------------------------------------------------------------------
    async def _next_queries(
        self, index: int, queries: list[str], last_chunks: list[Chunk], new_chunks: list[Chunk]
    ) -> list[str] | None:
        if index < len(self.sub_queries):
            return [self.sub_queries[index]]
        if self.refine_query is not None:
            out = await self._callback("refine_query", self.refine_query, index)
            who = "refine_query"
        elif self.loop.refiner is not None:
            self.step = "refiner"
            context = RefineContext(
                original=self.query,
                index=index,
                queries=list(queries),
                history=list(self.history),
                last_chunks=last_chunks,
                new_chunks=new_chunks,
                chunks=self._ranked(),
                tried=frozenset(self.tried),
                retriever=self.loop.retriever,
            )
            refine = method(self.loop.refiner, "refine", "refiner")
            try:
                out = await self.tracker.bounded(call(refine, context))
            except BudgetExceeded:
                raise
            except Exception as error:
                error.add_note(f"ragloop: raised by the refiner after iteration {index}")
                raise
            who = "refiner"
        else:
            return list(queries)
        return _as_queries(out, who)

    # -- results and events ---------------------------------------------------------------------
    def _finish(self, reason: StopReason, *, error: str | None = None) -> RetrievalResult:
        chunks = self._ranked()
        result = RetrievalResult(
            query=self.query,
            stop_reason=reason,
            error=error,
            trace=self.history,
            chunks=chunks,
            budget_used=self.tracker.spend,
            usage=self.tracker.usage,
            cache_stats=self.cache,
            run_id=self.telemetry.run_id,
        )
        self.telemetry.span.set(
            otel.retrieval_loop_outcome(
                cache_hits=self.cache.hits,
                cache_misses=self.cache.misses,
                plan_reuse_rate=result.plan_reuse_rate,
                sticky_route_rate=result.sticky_route_rate,
            )
        )
        return finish(
            self.telemetry,
            result,
            chunk_count=len(chunks),
            attributes={"chunks": chunk_refs(chunks)},
        )

    def _reformulation_event(self, index: int, queries: list[str] | None) -> None:
        """What the next iteration will search, and who said so."""
        if index < len(self.sub_queries):
            by = "sub_queries"
        elif self.refine_query is not None:
            by = "refine_query"
        else:
            by = "refiner" if self.loop.refiner is not None else "repeat"
        self.telemetry.event(
            EventKind.REFORMULATION,
            iteration=index,
            attributes={"strategy": by, "query_count": len(queries or []), "stop": queries is None},
            content={"queries": queries or []},
        )

    def _iteration_event(self, it: RetrievalIteration, queries: list[str]) -> None:
        plan = self.plans[0]
        self.telemetry.event(
            EventKind.ITERATION,
            iteration=it.index,
            attributes={
                "query_chars": len(it.query),
                "query_count": len(queries),
                "shape": plan.shape.value,
                "route": it.route,
                "results_n": it.results_n,
                "new_chunks_n": it.new_chunks_n,
                "best_score": it.best_score,
                "plan_reused": it.plan_reused,
                "sticky": it.sticky,
                "cache_hits": it.cache_hits,
                "cache_misses": it.cache_misses,
                "elapsed_ms": it.elapsed_ms,
            },
            content={
                "queries": queries,
                "understanding": [p.reason for p in self.plans],
                "decision_reason": it.decision.reason,
            },
        )


async def _gather(*steps: Awaitable[T]) -> list[T]:
    """Await steps concurrently; the first failure is raised once all have ended."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def _searches(plans: list[UnderstoodQuery]) -> list[_Search]:
    searches: list[_Search] = []
    seen: set[str] = set()
    for plan in plans:
        for text in plan.searches:
            key = normalize_query(text)
            if key and key not in seen:
                seen.add(key)
                searches.append(_Search(text, plan.hyde or text))
    return searches


def _interleave(rankings: list[list[Chunk]]) -> list[Chunk]:
    """One iteration's chunks without repeats, by rank, then by search order."""
    seen: dict[str, tuple[int, int, Chunk]] = {}
    for order, ranking in enumerate(rankings):
        for rank, chunk in enumerate(ranking):
            if chunk.id not in seen or (rank, order) < seen[chunk.id][:2]:
                seen[chunk.id] = (rank, order, chunk)
    return [c for _, _, c in sorted(seen.values(), key=lambda t: t[:2])]


def _chunks(found: object, role: str) -> list[Chunk]:
    if not isinstance(found, list | tuple) or not all(isinstance(c, Chunk) for c in found):
        raise ComponentError(
            f"{role} returned {type(found).__name__}; expected a list of ragloop.Chunk"
        )
    return list(found)


def _as_queries(out: object, who: str) -> list[str] | None:
    if out is None:
        return None
    items = [out] if isinstance(out, str) else out
    if not isinstance(items, list | tuple) or not all(isinstance(q, str) for q in items):
        raise ComponentError(
            f"{who} returned {type(out).__name__}; expected str, list[str] or None"
        )
    queries = [" ".join(q.split()) for q in items if q.strip()]
    return queries or None

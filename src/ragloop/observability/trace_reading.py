"""Reading a stored run: its steps (iterations or turns, with their searches, chunks, verdicts and
retrieval hops) and the one-line summary of how it ended, as `ragloop traces show`, `ragloop ask`
and the HTML report present them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragloop.observability.events import EventKind, LoopEvent
from ragloop.observability.traces import TraceRecord


@dataclass
class TraceChunk:
    id: str
    source: str
    score: float
    title: str | None = None
    text: str | None = None


@dataclass
class TraceStep:
    """One iteration (RAGLoop) or controller turn (AgentLoop) of a stored run, as shown."""

    number: int
    queries: list[str] = field(default_factory=list)
    strategy: str | None = None
    reasoning: str | None = None
    chunks: list[TraceChunk] = field(default_factory=list)
    score: float | None = None
    reason: str | None = None
    answer: str | None = None
    note: str | None = None  # an agent controller's text
    tools: list[str] = field(default_factory=list)
    at: float = 0.0
    # the hops of the RetrievalLoop runs that served this step's searches (nested runs), and
    # why each of those runs stopped
    hops: list[TraceStep] = field(default_factory=list)
    hop_stops: list[str] = field(default_factory=list)
    finished: bool = True  # False for hops whose step never finished (the run stopped first)
    # a retrieval hop's searches, from its search events: the queries run (a decomposed
    # question's parts, a refiner's sub-queries), in order
    searched: list[str] = field(default_factory=list)
    results: int | None = None  # how many chunks a hop's searches returned (its results_n)

    @property
    def chunk_count(self) -> int:
        """The chunks the step found: a hop's own count when its events give one."""
        return self.results if self.results is not None else len(self.chunks)

    @property
    def best_chunk_score(self) -> float | None:
        return max((c.score for c in self.chunks), default=None)


def _chunks(attributes: Mapping[str, Any]) -> list[TraceChunk]:
    refs = attributes.get("chunks")
    texts = attributes.get("chunk_texts")
    refs = refs if isinstance(refs, list) else []
    texts = texts if isinstance(texts, list) else []
    out = []
    for i, ref in enumerate(refs):
        if isinstance(ref, dict):
            text = texts[i] if i < len(texts) and isinstance(texts[i], str) else None
            score = ref.get("score")
            out.append(
                TraceChunk(
                    id=str(ref.get("id", "")),
                    source=str(ref.get("source", "")),
                    score=float(score) if isinstance(score, int | float) else 0.0,
                    title=ref["title"] if isinstance(ref.get("title"), str) else None,
                    text=text,
                )
            )
    return out


def trace_steps(record: TraceRecord) -> list[TraceStep]:
    """The steps of a stored run, read from its events: RAGLoop iterations, AgentLoop turns
    (their tool calls and the chunks their searches returned), RetrievalLoop hops. The hops of
    a RetrievalLoop that ran inside the run (a loop's retriever) are the ``hops`` of the step
    they served."""
    steps: dict[int, TraceStep] = {}
    nested: dict[str, dict[int, TraceStep]] = {}  # nested run id -> its hops so far
    hops: list[TraceStep] = []  # hops waiting for the step they serve
    stops: list[str] = []
    for event in record.events:
        if event.run_id != record.id:
            if event.kind is EventKind.RUN_FINISHED:
                stops.append(str(event.attributes.get("stop_reason")))
                hops += [h for _, h in sorted(nested.pop(event.run_id, {}).items())]
            elif event.kind in _HOP_EVENTS and event.iteration is not None:
                _read_step(nested.setdefault(event.run_id, {}), event, "retrieval")
            continue
        step = _read_step(steps, event, record.engine)
        if step is not None and (hops or stops):
            step.hops, step.hop_stops = step.hops + hops, step.hop_stops + stops
            hops, stops = [], []
    ordered = [steps[n] for n in sorted(steps)]
    if hops or stops:  # the run stopped before the step they served finished
        ordered.append(
            TraceStep(number=len(ordered) + 1, hops=hops, hop_stops=stops, finished=False)
        )
    return ordered


_HOP_EVENTS = (EventKind.ITERATION, EventKind.SEARCH)


def _read_step(steps: dict[int, TraceStep], event: LoopEvent, engine: str) -> TraceStep | None:
    """Add one event to the step it belongs to; that step, or None for a run-level event."""
    kinds = _HOP_EVENTS if engine == "retrieval" else (EventKind.ITERATION, EventKind.TOOL_CALL)
    if event.iteration is None or event.kind not in kinds:
        return None
    a = event.attributes
    # agent turns and retrieval hops count from 0 in events, RAGLoop iterations from 1
    number = event.iteration + 1 if engine in ("agent", "retrieval") else event.iteration
    step = steps.setdefault(number, TraceStep(number=number, at=event.timestamp))
    if event.kind is EventKind.SEARCH:
        _read_search(step, a)
        return None  # the hop is read when its iteration event ends it
    if event.kind is EventKind.TOOL_CALL:
        tool = str(a.get("tool"))
        step.tools.append(tool)
        raw = a.get("args")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if tool == "search" and isinstance(args.get("query"), str):
            step.queries.append(args["query"])
        if tool in ("answer", "synthesis") and isinstance(args.get("text"), str):
            step.answer = args["text"]
        step.chunks += _chunks(a)
        return step
    queries = a.get("queries")
    if isinstance(a.get("results_n"), int):
        step.results = a["results_n"]
    if step.searched:  # a hop: what it searched, not the question it was given
        step.queries = list(step.searched)
    elif isinstance(queries, list):
        step.queries = [str(q) for q in queries]
    step.strategy = a.get("strategy") or step.strategy
    step.reasoning = a.get("reasoning") if isinstance(a.get("reasoning"), str) else None
    score = a.get("score")
    step.score = _number(score)
    step.reason = a.get("reason") if isinstance(a.get("reason"), str) else None
    if isinstance(a.get("answer"), str):
        step.answer = a["answer"]
    if isinstance(a.get("text"), str) and a["text"]:
        step.note = a["text"]
    if a.get("chunks"):
        step.chunks = _chunks(a)
    return step


def _read_search(step: TraceStep, attributes: Mapping[str, Any]) -> None:
    """A retrieval hop's search: its query (when content was recorded) and its chunks, merged
    with the hop's other searches' (one entry per chunk, its best score, best first)."""
    query = attributes.get("query")
    if isinstance(query, str) and query not in step.searched:
        step.searched.append(query)
    best = {c.id: c for c in step.chunks}
    for chunk in _chunks(attributes):
        held = best.get(chunk.id)
        if held is None or chunk.score > held.score:
            best[chunk.id] = chunk
    step.chunks = sorted(best.values(), key=lambda c: -c.score)


@dataclass(frozen=True)
class RunSummary:
    """What ran and why it stopped, in words a display can show as they are."""

    engine: str  # as the command that ran it named it (its ``meta["engine"]``), else the trace's
    stop_reason: str
    detail: str


def summarize(record: TraceRecord, steps: list[TraceStep] | None = None) -> RunSummary:
    """:class:`RunSummary` of a stored run.

    ``ragloop ask --engine retrieval`` runs one RAGLoop iteration over what a RetrievalLoop
    gathered: its stop reason is the RetrievalLoop's (the one-iteration loop always stops on
    its count), and the detail counts the hops and gives the answer's score.
    """
    steps = trace_steps(record) if steps is None else steps
    engine = str(record.meta.get("engine") or record.engine)
    stop = record.stop_reason or "-"
    finished = [s for s in steps if s.finished]
    if record.engine == "agent":
        searches = sum(s.tools.count("search") for s in steps)
        return RunSummary(engine, stop, f"after {record.iterations} turn(s), {searches} search(es)")
    if record.engine == "retrieval":
        return RunSummary(engine, stop, f"after {record.iterations} hop(s)")
    scored = [s for s in finished if s.score is not None]
    best = max(scored, key=lambda s: s.score or 0.0, default=None)
    if engine == "retrieval" and finished:
        hops = sum(len(s.hops) for s in steps)
        stops = [why for s in steps for why in s.hop_stops]
        score = f", score {best.score:.2f}" if best is not None and best.score is not None else ""
        detail = f"after {hops} retrieval hop(s); answered in one iteration{score}"
        return RunSummary(engine, stops[-1] if stops else stop, detail)
    if not finished:
        return RunSummary(engine, stop, "before any iteration finished")
    detail = f"after {record.iterations} iteration(s)"
    if best is not None and best.score is not None:
        detail += f"; best: iteration {best.number}, score {best.score:.2f}"
    return RunSummary(engine, stop, detail)


def _number(value: object) -> float | None:
    """A stored score as a float; None for what is not a number or does not fit one (a
    corrupted or hand-written trace may hold anything)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None

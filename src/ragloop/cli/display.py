"""How runs look in a terminal: each iteration as it happens, the answer, stored traces."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ragloop.cli.common import shown_path
from ragloop.cli.tables import cell, printable, shorten
from ragloop.core.records import StopReason
from ragloop.core.records.gaps import EvidenceGaps, shown_answer
from ragloop.observability.events import EventKind, LoopEvent
from ragloop.observability.trace_reading import TraceStep, summarize, trace_steps
from ragloop.observability.traces import TraceRecord

SHOWN_CHUNKS = 3
QUERY_CHARS = 300  # of a query or question in a step or heading; traces and --json hold it all
REASON_CHARS = 600  # of an evaluator's reason or a controller's note (they may quote the question)


def score_bar(score: float, width: int = 20) -> Text:
    filled = round(max(0.0, min(1.0, score)) * width)
    colour = "green" if score >= 0.8 else "yellow" if score >= 0.5 else "red"
    bar = Text("█" * filled, style=colour)
    bar.append("░" * (width - filled), style="dim")
    bar.append(f" {score:.2f}", style=f"bold {colour}")
    return bar


def render_step(step: TraceStep, engine: str) -> RenderableType:
    """One iteration (or agent turn): queries, strategy, top chunks, score and reason."""
    title = Text()
    label = {"agent": "Turn", "retrieval": "Retrieval hop"}.get(engine, "Iteration")
    title.append(f"{label} {step.number}", style="bold")
    if step.strategy:
        title.append(f"  {printable(step.strategy)}", style="cyan")
    elif engine == "rag" and step.number == 1:
        title.append("  original question", style="cyan")
    tools = [t for t in dict.fromkeys(step.tools) if t != "search"]
    if tools:
        title.append(printable("  " + ", ".join(tools)), style="magenta")
    lines: list[RenderableType] = [title]
    for query in step.queries:
        lines.append(Text.assemble(("  query  ", "dim"), (shorten(query, QUERY_CHARS), "italic")))
    if step.note:
        lines.append(Text.assemble(("  why    ", "dim"), shorten(step.note, REASON_CHARS)))
    if step.chunks:
        table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
        table.add_column(justify="right", style="dim", no_wrap=True)
        table.add_column(justify="right", no_wrap=True)
        table.add_column(overflow="fold")
        for rank, chunk in enumerate(step.chunks[:SHOWN_CHUNKS], 1):
            where = cell(shown_path(chunk.source))
            if chunk.title:
                where += f"  [dim]{cell(chunk.title)}[/]"
            table.add_row(f"{rank}.", f"{chunk.score:.3f}", where)
        more = len(step.chunks) - SHOWN_CHUNKS
        lines.append(Padding(table, (0, 0, 0, 9)))
        if more > 0:
            lines.append(Text(f"         … and {more} more chunk(s)", style="dim"))
    if step.score is not None:
        lines.append(Text.assemble(("  score  ", "dim"), score_bar(step.score)))
    if step.reason:
        lines.append(
            Text.assemble(("  reason ", "dim"), (shorten(step.reason, REASON_CHARS), "yellow"))
        )
    return Padding(Group(*lines), (0, 0, 1, 0))


# the colour of each kind of stop (StopReason.outcome), here as in the HTML report
OUTCOME_STYLES = {
    "success": "green",
    "settled": "cyan",
    "limit": "blue",
    "budget": "yellow",
    "caller": "magenta",
    "gave_up": "bright_black",
    "error": "red",
}


def stop_style(stop_reason: str) -> str:
    try:
        outcome = StopReason(stop_reason).outcome
    except ValueError:  # a trace written by another version
        return "bold"
    return f"bold {OUTCOME_STYLES[outcome]}"


def answer_title(stop_reason: str) -> tuple[str, str]:
    """How far to trust a run's answer, as a panel title and colour: only a converged or
    answered run stands by its answer; one that gave up or failed did not answer; any other
    stop (attempts, budget or evidence ran out) leaves a best attempt."""
    try:
        outcome = StopReason(stop_reason).outcome
    except ValueError:
        outcome = ""
    if outcome == "success":
        return "Answer", "green"
    if outcome == "error":
        return "Not answered", "red"
    return "Not sure: the closest passages", "yellow"


def render_answer(
    answer: str | None,
    stop_reason: str,
    detail: str,
    *,
    gaps: EvidenceGaps | None = None,
    confident: bool | None = None,
) -> RenderableType:
    """The answer in a panel whose title and colour say how far to trust it
    (:func:`answer_title`; ``confident=False`` marks an answer below its target precision);
    one that is not confident shows its evidence first, as every front end does
    (:func:`~ragloop.core.records.gaps.shown_answer`), then what was found and searched
    (:func:`render_gaps`)."""
    title, colour = answer_title(stop_reason)
    sure = colour == "green" and confident is not False
    if not sure and colour == "green":
        title, colour = "Not sure: the closest passages", "yellow"
    shown = shown_answer(answer, sure, gaps)
    body = Text(printable(shown or "(no answer)"))
    footer = Text.assemble(
        ("stopped: ", "dim"),
        (printable(stop_reason), stop_style(stop_reason)),
        (f"  {printable(detail)}", "dim"),
    )
    if gaps is not None and gaps.probability is not None:
        target = "" if gaps.target is None else f" (target {gaps.target:.2f})"
        footer.append(f"  chance right {gaps.probability:.2f}{target}", "dim")
    parts: list[RenderableType] = [body, Text("")]
    if gaps is not None:
        parts += [render_gaps(gaps, nearest=sure), Text("")]
    return Panel(Group(*parts, footer), title=title, title_align="left", border_style=colour)


PART_CHARS = 100  # a part of the question shown in a gap report


def render_gaps(gaps: EvidenceGaps, *, nearest: bool = True) -> Text:
    """What was found and what was not: each part of the question with the source that covers
    it, the words no document has, the nearest misses (unless the answer shows them already)
    and the searches tried."""
    text = Text()
    for part in gaps.parts:
        if part.found:
            text.append("found      ", "green")
            text.append(_clip(part.part.rstrip("?"), PART_CHARS))
            text.append(f"  in {printable(part.source or '')}\n", "dim")
        else:
            text.append("not found  ", "red")
            text.append(_clip(part.part.rstrip("?"), PART_CHARS) + "\n")
    if gaps.missing_terms:
        terms = ", ".join(printable(t) for t in gaps.missing_terms[:6])
        text.append("no chunk mentions  ", "dim")
        text.append(terms + "\n")
    for miss in gaps.nearest if nearest else []:
        text.append(f"closest {miss.score:.2f}  ", "dim")
        text.append(printable(miss.source), "cyan")
        text.append(f"  {_clip(miss.text, 90)}\n", "dim")
    if gaps.searches:
        text.append("searched  ", "dim")
        text.append(" · ".join(_clip(q, 60) for q in gaps.searches))
    return text


def _clip(text: str, limit: int) -> str:
    flat = " ".join(printable(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


class LiveSteps:
    """Prints each step of the run being watched as it finishes, reading the run's events;
    ``on_status`` is told what the run is doing meanwhile (searching, answering, judging)."""

    def __init__(
        self, console: Console, *, on_status: Callable[[str], object] | None = None
    ) -> None:
        self.console = console
        self.events: dict[str, list[LoopEvent]] = {}
        self.on_status = on_status

    def __call__(self, event: LoopEvent) -> None:
        status = live_status(event)
        if status is not None and self.on_status is not None:
            self.on_status(cell(status))  # a status line is markup
        events = self.events.setdefault(event.run_id, [])
        events.append(event)
        if event.kind is not EventKind.ITERATION or event.iteration is None:
            return
        record = TraceRecord.from_events(events, content=True)
        steps = trace_steps(record)
        if steps:
            self.console.print(render_step(steps[-1], event.engine))


def live_status(event: LoopEvent) -> str | None:
    """A few words on what the run is doing after ``event``, or None to keep the last ones."""
    a = event.attributes
    if event.kind is EventKind.SEARCH:
        found = len(a.get("chunks") or [])
        return f"searched {shorten(str(a.get('query', '')), 60)!r}: {found} chunk(s)…"
    if event.kind is EventKind.ANSWER and not a.get("final"):
        return "judging the answer…"
    if event.kind is EventKind.EVALUATION:
        return f"score {a.get('score', 0.0):.2f}…"
    if event.kind is EventKind.REFORMULATION:
        return f"reformulating ({a.get('strategy')})…"
    if event.kind is EventKind.ITERATION:
        return "next iteration…"
    return None


def print_trace(console: Console, record: TraceRecord) -> None:
    """A stored trace: its question, each step, and the answer."""
    when = datetime.fromtimestamp(record.started_at).strftime("%Y-%m-%d %H:%M:%S")
    console.print(Rule(f"trace {cell(record.id[:12])}", align="left"))
    console.print(
        Text.assemble(
            ("question  ", "dim"),
            (
                shorten(record.question, QUERY_CHARS)
                if record.question
                else "(not recorded: the trace keeps no content, [traces] content = false)",
                "bold",
            ),
        )
    )
    steps = trace_steps(record)
    summary = summarize(record, steps)
    meta = ", ".join(f"{k}={v}" for k, v in record.meta.items() if v is not None and k != "engine")
    console.print(Text(printable(f"engine {summary.engine} · {when} · {meta}"), style="dim"))
    console.print()
    for step in steps:
        print_step(console, step, record.engine)
    detail = summary.detail
    if record.duration_ms is not None:
        detail += f" in {record.duration_ms / 1000:.1f} s"
    console.print(render_answer(record.answer, summary.stop_reason, detail, gaps=record.gaps))


def print_step(console: Console, step: TraceStep, engine: str) -> None:
    """A stored step: the retrieval hops that served it, then the step itself."""
    for hop in step.hops:
        console.print(render_step(hop, "retrieval"))
    if step.hop_stops:
        stops = ", ".join(dict.fromkeys(step.hop_stops))
        console.print(Text(printable(f"  retrieval stopped: {stops}"), style="dim"), "")
    if step.finished:
        console.print(render_step(step, engine))

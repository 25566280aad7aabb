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
from ragloop.observability.events import EventKind, LoopEvent
from ragloop.observability.traces import TraceRecord, TraceStep, trace_steps

SHOWN_CHUNKS = 3


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
        title.append(f"  {step.strategy}", style="cyan")
    elif engine == "rag" and step.number == 1:
        title.append("  original question", style="cyan")
    tools = [t for t in dict.fromkeys(step.tools) if t != "search"]
    if tools:
        title.append("  " + ", ".join(tools), style="magenta")
    lines: list[RenderableType] = [title]
    for query in step.queries:
        lines.append(Text.assemble(("  query  ", "dim"), (query, "italic")))
    if step.note:
        lines.append(Text.assemble(("  why    ", "dim"), step.note))
    if step.chunks:
        table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
        table.add_column(justify="right", style="dim")
        table.add_column(justify="right")
        table.add_column()
        for rank, chunk in enumerate(step.chunks[:SHOWN_CHUNKS], 1):
            where = shown_path(chunk.source)
            if chunk.title:
                where += f"  [dim]{chunk.title}[/]"
            table.add_row(f"{rank}.", f"{chunk.score:.3f}", where)
        more = len(step.chunks) - SHOWN_CHUNKS
        lines.append(Padding(table, (0, 0, 0, 9)))
        if more > 0:
            lines.append(Text(f"         … and {more} more chunk(s)", style="dim"))
    if step.score is not None:
        lines.append(Text.assemble(("  score  ", "dim"), score_bar(step.score)))
    if step.reason:
        lines.append(Text.assemble(("  reason ", "dim"), (step.reason, "yellow")))
    return Padding(Group(*lines), (0, 0, 1, 0))


# How a run's end is shown: only a converged or answered run has an answer it stands by.
CONFIDENT_STOPS = frozenset({"converged", "answered"})
NOT_ANSWERED_STOPS = frozenset({"gave_up", "error"})


def render_answer(answer: str | None, stop_reason: str, detail: str) -> RenderableType:
    """The answer in a panel whose title and colour say how far to trust it: "Answer" (green)
    for a converged or answered run, "Not confident: best attempt" (yellow) when the loop ran
    out of attempts or budget, "Not answered" (red) when it gave up or failed."""
    if stop_reason in CONFIDENT_STOPS:
        title, colour = "Answer", "green"
    elif stop_reason in NOT_ANSWERED_STOPS:
        title, colour = "Not answered", "red"
    else:
        title, colour = "Not confident: best attempt", "yellow"
    body = Text(answer or "(no answer)")
    footer = Text.assemble(("stopped: ", "dim"), (stop_reason, "bold"), (f"  {detail}", "dim"))
    return Panel(
        Group(body, Text(""), footer), title=title, title_align="left", border_style=colour
    )


class LiveSteps:
    """An event listener that prints each step of the run being watched as it finishes."""

    def __init__(self, console: Console, *, on_step: Callable[[], None] | None = None) -> None:
        self.console = console
        self.events: dict[str, list[LoopEvent]] = {}
        self.on_step = on_step

    def __call__(self, event: LoopEvent) -> None:
        events = self.events.setdefault(event.run_id, [])
        events.append(event)
        if event.kind is not EventKind.ITERATION or event.iteration is None:
            return
        record = TraceRecord.from_events(events, content=True)
        steps = trace_steps(record)
        if steps:
            self.console.print(render_step(steps[-1], event.engine))
            if self.on_step is not None:
                self.on_step()


def print_trace(console: Console, record: TraceRecord) -> None:
    """A stored trace: its question, each step, and the answer."""
    when = datetime.fromtimestamp(record.started_at).strftime("%Y-%m-%d %H:%M:%S")
    console.print(Rule(f"trace {record.id[:12]}", align="left"))
    console.print(
        Text.assemble(
            ("question  ", "dim"),
            (record.question or "(not recorded: content capture was off)", "bold"),
        )
    )
    meta = ", ".join(f"{k}={v}" for k, v in record.meta.items() if v is not None)
    console.print(Text(f"engine {record.engine} · {when} · {meta}", style="dim"))
    console.print()
    for step in trace_steps(record):
        console.print(render_step(step, record.engine))
    detail = f"after {record.iterations} iteration(s)"
    if record.duration_ms is not None:
        detail += f" in {record.duration_ms / 1000:.1f} s"
    console.print(render_answer(record.answer, record.stop_reason or "-", detail))

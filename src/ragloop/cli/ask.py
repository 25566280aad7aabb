"""ragloop ask QUESTION: answer from the knowledge base, showing every iteration."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from ragloop.cli.common import (
    InputError,
    console,
    errors,
    kb_option,
    open_kb,
    open_traces,
    output_option,
    print_json,
    text_argument,
    warnings_shown,
)
from ragloop.cli.common import settings as config_settings
from ragloop.cli.demo import open_demo
from ragloop.cli.display import QUERY_CHARS, LiveSteps, render_answer
from ragloop.cli.tables import Column, cell, print_table, shorten
from ragloop.core.errors import RagloopError
from ragloop.core.records.agent import AgentResult
from ragloop.core.records.rag import LoopResult
from ragloop.demo import DEMO_QUESTIONS, demo_kb_path
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.observability.staleness import RUNS_SCANNED
from ragloop.observability.trace_reading import summarize
from ragloop.observability.traces import TraceRecord, TraceRecorder, TraceStorage
from ragloop.offline import ENGINES
from ragloop.providers import resolve_model
from ragloop.server.conversation import Rewrite, Turn, rewrite_meta, standalone

if TYPE_CHECKING:
    from ragloop.config import Settings

Result = LoopResult | AgentResult


def build_engine(
    engine: str,
    kb: KnowledgeBase,
    model_spec: str | None,
    settings: dict[str, Any],
    model_options: dict[str, Any] | None = None,
) -> Any:
    builder = ENGINES.get(engine)
    if builder is None:
        raise click.ClickException(
            f"the {engine} engine is not available in this build of ragloop; "
            f"use one of: {', '.join(sorted(ENGINES))}"
        )
    try:
        model = resolve_model(model_spec, **(model_options or {}))
        if engine == "agent":
            settings.pop("confidence_threshold", None)
        return builder(kb, model=model, **settings)
    except RagloopError as error:
        raise click.ClickException(str(error)) from None


def heading(text: str, n: int, total: int, *, demo: bool) -> str:
    shown = cell(shorten(text, QUERY_CHARS))
    if not demo:
        return f"[bold]{shown}[/]"
    return f"[dim]{n}/{total} · {DEMO_QUESTIONS[n - 1].kind}[/]  [bold]{shown}[/]"


def show_heading(text: str, n: int, total: int, *, demo: bool) -> None:
    console.rule(heading(text, n, total, demo=demo), align="left")
    if demo:
        console.print(f"[dim italic]{DEMO_QUESTIONS[n - 1].shows}[/]\n")


def run_one(
    loop: Any, question: str, *, quiet: bool, recorder: TraceRecorder
) -> tuple[Result, str | None]:
    """Run the loop on one question; print its steps live unless ``quiet``: the live view
    reads the run's event stream (``astream``), as the HTTP stream and the web page do."""
    before = set(recorder.records)
    if quiet:
        result: Result = loop.run(question)
    else:
        with console.status("retrieving…") as status:
            live = LiveSteps(console, on_status=status.update)

            async def watch() -> Result:
                stream = loop.astream(question)
                async for event in stream:
                    live(event)
                return cast(Result, stream.result)

            result = asyncio.run(watch())
    new = [rid for rid in recorder.records if rid not in before]
    return result, new[-1] if new else None


@click.command()
@click.argument("question", required=False)
@kb_option
@click.option(
    "--demo",
    is_flag=True,
    help="Use the demo knowledge base; with no QUESTION, ask every demo question.",
)
@click.option(
    "--engine",
    type=click.Choice(["rag", "agent", "retrieval"]),
    default=None,
    help="Which loop answers (default: [engine] default of the config, else rag).",
)
@click.option(
    "--model",
    "model_spec",
    default=None,
    metavar="SPEC",
    help="offline (default), openai:MODEL, anthropic:MODEL or "
    "openai-compatible:BASE_URL#MODEL: the LLM components replace the offline ones "
    "(default: [model] spec of the config).",
)
@click.option(
    "--max-iterations",
    "--max-iter",
    "max_iterations",
    type=click.IntRange(1, 50),
    default=None,
    help="Iterations (rag), turns (agent) or retrieval hops (retrieval) at most "
    "(--max-iter works too).",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0.0, 1.0),
    default=None,
    help="Evaluation score that ends the rag loop (default 0.8).",
)
@click.option(
    "--target-precision",
    type=click.FloatRange(0.0, 1.0),
    default=None,
    help="Stand by an answer only when its calibrated chance of being right reaches this "
    "(offline default 0.8, read through the shipped calibration; replaces --threshold); "
    "otherwise show the closest passages, not confident, with what was and was not found.",
)
@click.option(
    "--calibration",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="What the evaluator's score means: a file `ragloop eval --calibrate` wrote "
    "(default: [engine] calibration of the config, else the score itself).",
)
@click.option(
    "--top-k",
    type=click.IntRange(1, 100),
    default=None,
    help="Chunks the answer is drawn from (rag, retrieval; default 5).",
)
@click.option(
    "--continue",
    "-c",
    "continue_last",
    is_flag=True,
    help="Continue the last conversation: QUESTION is read with the questions and answers "
    "before it (a follow-up such as 'and what about its weight?' is rewritten to stand alone).",
)
@click.option(
    "--conversation",
    "conversation_id",
    default=None,
    metavar="ID",
    help="Continue this conversation (its id, or the start of it: `ragloop traces list` "
    "shows them).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@output_option("--trace-out", help="Also write the run's trace to this JSON file.")
def ask(
    question: str | None,
    kb_location: str | None,
    demo: bool,
    engine: str | None,
    model_spec: str | None,
    max_iterations: int | None,
    threshold: float | None,
    target_precision: float | None,
    calibration: Path | None,
    top_k: int | None,
    continue_last: bool,
    conversation_id: str | None,
    as_json: bool,
    trace_out: Path | None,
) -> None:
    """Answer QUESTION from the knowledge base, showing each iteration of the loop.

    QUESTION "-" reads the question from standard input. Works offline by default. Every run
    is stored as a trace beside the knowledge base (see `ragloop traces`), with the question
    and answer unless ragloop.toml says `[traces] content = false`; each question starts a
    conversation that -c (or --conversation ID) continues.
    """
    if question is None and not demo:
        raise click.UsageError("give a QUESTION, or --demo to ask the demo questions")
    following = continue_last or conversation_id is not None
    if following and question is None:
        raise click.UsageError("-c and --conversation continue a conversation with a QUESTION")
    if question is not None:
        question = text_argument(question, "question")
    if kb_location is not None and demo:
        raise click.UsageError("--kb and --demo name two knowledge bases; give one")
    configured = config_settings()
    if question is not None:  # the server's limit: what it refuses, ask refuses the same way
        refused = configured.server.question_refusal(question)
        if refused is not None:
            raise InputError(refused[1])
    engine = engine or configured.engine.default
    model_options = configured.model.options() if model_spec is None else {}
    model_spec = model_spec if model_spec is not None else configured.model.spec
    if threshold is not None and target_precision is not None:
        raise click.UsageError("--threshold and --target-precision both say when to stop; give one")
    given: dict[str, Any] = {
        "max_iterations": max_iterations,
        "target_precision": target_precision,
        "calibration": None if calibration is None else str(calibration),
    }
    if engine in ("rag", "retrieval"):
        given["top_k"] = top_k
        given["confidence_threshold"] = threshold
    settings = {
        **configured.engine.settings(engine),
        **{k: v for k, v in given.items() if v is not None},
    }
    if threshold is not None:  # the threshold asked for replaces the config's target
        settings.pop("target_precision", None)
    elif target_precision is not None:
        settings.pop("confidence_threshold", None)
    questions = [question] if question is not None else [q.text for q in DEMO_QUESTIONS]
    kb = open_demo() if demo else open_kb(kb_location, create=False)
    location = str(demo_kb_path()) if demo else kb_location
    store = open_traces(location)
    meta: dict[str, Any] = {
        "kb": str(kb.path or "postgresql"),
        "engine": engine,
        "model": model_spec or "offline",
        **settings,
    }
    budget = configured.budget.budget()
    try:
        if question is not None:  # one question: a turn of a conversation, new or continued
            talk = Talk.of(store, conversation_id if following else None, new=not following)
            rewrite = talk.rewrite(question, model_spec, model_options, configured)
            questions = [rewrite.question]
            meta.update(talk.meta(rewrite, content=configured.traces.content))
            if rewrite.followup is not None and not as_json:
                console.print(f"[dim]read with the conversation: {cell(rewrite.question)}[/]")
        options = {**settings, "budget": budget} if budget is not None else dict(settings)
        loop = build_engine(engine, kb, model_spec, options, model_options)
        # a local trace of your own question keeps its text unless [traces] content = false
        with (
            warnings_shown(),
            TraceRecorder(
                store, meta=meta, content=configured.traces.content, keep=max(1000, len(questions))
            ) as recorder,
        ):
            outcomes = [
                ask_one(
                    loop,
                    text,
                    n,
                    len(questions),
                    recorder,
                    demo=demo,
                    listing=question is None,
                    quiet=as_json,
                )
                for n, text in enumerate(questions, 1)
            ]
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
    finally:
        kb.close()
        store.close()
    single = question is not None
    if trace_out is not None:
        traces = [recorder.records[t].model_dump(mode="json") for _, t in outcomes if t]
        data = traces[0] if single and traces else traces
        trace_out.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    if as_json:
        results = [r.model_dump(mode="json") for r, _ in outcomes]
        print_json(results[0] if single else results)
        return
    if not single:
        show_summary([r for r, _ in outcomes])
    if demo and kb.embedder is None:
        errors.print(
            "[yellow]note:[/] keyword search only: the MiniLM embedder could not be loaded "
            "(see `ragloop kb stats`), so the documents' vocabulary is matched by words alone"
        )


def ask_one(
    loop: Any,
    text: str,
    n: int,
    total: int,
    recorder: TraceRecorder,
    *,
    demo: bool,
    listing: bool,
    quiet: bool,
) -> tuple[Result, str | None]:
    """Ask one question: its heading, its steps as they happen, its answer and trace id."""
    if not quiet:
        show_heading(text, n, total, demo=listing)
    result, trace_id = run_one(loop, text, quiet=quiet, recorder=recorder)
    if not quiet:
        # what ran and why it stopped, as `traces show` and the HTML report say it
        record = recorder.records.get(trace_id) if trace_id else None
        if record is not None:
            summary = summarize(record)
            stop, detail = summary.stop_reason, summary.detail
        else:
            stop, detail = result.stop_reason.value, f"after {result.iterations} iteration(s)"
        console.print(
            render_answer(result.answer, stop, detail, gaps=result.gaps, confident=result.confident)
        )
        if trace_id and trace_id not in recorder.unsaved:  # an unsaved one was warned of
            where = " --demo" if demo else ""
            follow = "" if listing else f"; follow up: ragloop ask -c QUESTION{where}"
            console.print(
                f"[dim]trace {trace_id[:12]}: ragloop traces show {trace_id[:12]}{where}"
                f"{follow}[/]\n"
            )
    return result, trace_id


def show_summary(results: list[Result]) -> None:
    rows = []
    for demo_question, result in zip(DEMO_QUESTIONS, results, strict=True):
        strategies = (
            [it.strategy.value for it in result.trace if it.strategy]
            if isinstance(result, LoopResult)
            else [e.tool for e in result.tool_history]
        )
        found = [f for f in demo_question.facts if f in (result.answer or "")]
        rows.append(
            [
                demo_question.kind,
                str(result.iterations),
                ", ".join(strategies) or "-",
                result.stop_reason.value,
                cell(f"{len(found)}/{len(demo_question.facts)}: {', '.join(found) or '-'}"),
            ]
        )
    columns: list[Column | str] = ["question", Column("iterations", numeric=True)]
    columns += ["strategies", "stopped", "facts found"]
    print_table(console, columns, rows, title="demo questions")


# -- conversations: the turns of `ragloop ask -c`, kept in the runs' traces ---------------------

CONVERSATION = "conversation"  # a run's meta: the conversation it is a turn of
TURN = "turn"  # and which turn (1: the question that started it)


@dataclass(frozen=True)
class Talk:
    """The conversation a question joins: its id and the turns before it, oldest first (from
    the stored runs whose meta names it: a conversation lives in its runs' traces)."""

    id: str
    turns: tuple[Turn, ...] = ()

    @classmethod
    def of(cls, store: TraceStorage, wanted: str | None, *, new: bool) -> Talk:
        """A new conversation (``new``), or the one ``wanted`` names (its id or the start of
        it; None: the newest conversation stored)."""
        if new:
            return cls(uuid.uuid4().hex[:12])
        try:
            runs = [
                r for r in store.list(RUNS_SCANNED) if isinstance(r.meta.get(CONVERSATION), str)
            ]
        except RagloopError as error:
            raise click.ClickException(str(error)) from None
        if not runs:
            raise click.ClickException(
                f"no conversation to continue in {store.location}: ask a question first"
            )
        if wanted is None:
            chosen = str(runs[0].meta[CONVERSATION])  # newest first
        else:
            found = {str(r.meta[CONVERSATION]) for r in runs}
            matches = sorted(c for c in found if c.startswith(wanted.strip()))
            if len(matches) != 1:
                problem = "no conversation" if not matches else "more than one conversation"
                raise click.ClickException(f"{problem} starts with {wanted!r}")
            chosen = matches[0]
        turns: list[Turn] = []
        for run in sorted((r for r in runs if r.meta[CONVERSATION] == chosen), key=_started):
            asked = run.meta.get("followup") or run.question  # the user's own words
            if isinstance(asked, str) and asked.strip():
                turns.append(Turn("user", asked))
            if run.answer:
                turns.append(Turn("assistant", run.answer))
        return cls(chosen, tuple(turns))

    def rewrite(
        self, question: str, spec: str | None, options: dict[str, Any], configured: Settings
    ) -> Rewrite:
        """``question`` read with the turns before it (the server's rewrite: the model's,
        else the heuristic), bounded as the server bounds it."""
        if not self.turns:
            return Rewrite(question)
        try:
            model = resolve_model(spec, **options)
        except RagloopError as error:
            raise click.ClickException(str(error)) from None
        limit = configured.server.max_question_chars
        turns = [*self.turns, Turn("user", question)]
        return asyncio.run(standalone(turns, model, max_chars=limit))

    def meta(self, rewrite: Rewrite, *, content: bool) -> dict[str, Any]:
        """What the run's trace keeps: the conversation, the turn, and the rewrite."""
        turn = sum(t.role == "user" for t in self.turns) + 1
        return {CONVERSATION: self.id, TURN: turn, **rewrite_meta(rewrite, content=content)}


def _started(record: TraceRecord) -> float:
    return record.started_at

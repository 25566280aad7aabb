"""ragloop traces ...: the stored runs of `ragloop ask`, listed, shown and exported."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ragloop.cli.common import (
    console,
    default_kb_location,
    errors,
    kb_option,
    open_kb,
    open_traces,
    output_option,
    parse_settings,
    print_json,
)
from ragloop.cli.display import print_trace
from ragloop.cli.tables import Column, cell, print_table, shorten
from ragloop.core.errors import RagloopError, StoreError, TraceCorrupted, TraceNotFound
from ragloop.core.files import is_postgres_dsn, traces_path_for
from ragloop.demo import demo_kb_path
from ragloop.observability.report_html import render_html
from ragloop.observability.staleness import (
    RUNS_SCANNED,
    StaleSource,
    VersionOf,
    stale_runs,
    stale_sources,
)
from ragloop.observability.traces import TraceRecord, TraceStorage

if TYPE_CHECKING:
    from ragloop.evaluation.replay import ReplayedQuestion, ReplayReport

F = TypeVar("F", bound=Callable[..., Any])
QUESTION_CHARS = 120  # of a question in the list; `traces show` and --json hold it whole


def demo_option(function: F) -> F:
    return click.option("--demo", is_flag=True, help="The demo knowledge base's traces.")(function)


def open_store(kb_location: str | None, demo: bool) -> TraceStorage:
    """The traces of the knowledge base named (else the default one); a knowledge base that
    is not there, with no traces of its own either, is an error (a typo in --kb is not "no
    traces yet")."""
    if kb_location is not None and demo:
        raise click.UsageError("--kb and --demo name two knowledge bases; give one")
    if not demo:
        location = kb_location or default_kb_location()
        if not is_postgres_dsn(location):
            file = Path(location).expanduser()
            if not file.exists() and not traces_path_for(file).exists():
                raise click.ClickException(
                    f"no knowledge base at {file} (nor traces beside it); create one with: "
                    f"ragloop ingest PATH --kb {file}"
                )
    return open_traces(str(demo_kb_path()) if demo else kb_location)


def load(store: TraceStorage, trace_id: str) -> TraceRecord:
    try:
        return store.get(trace_id)
    except (TraceNotFound, TraceCorrupted, StoreError) as error:
        raise click.ClickException(str(error)) from None
    finally:
        store.close()


@contextmanager
def current_versions(kb_location: str | None, demo: bool) -> Iterator[VersionOf]:
    """The version of each document, as the knowledge base the traces belong to holds it now
    (each looked up once)."""
    kb = open_kb(str(demo_kb_path()) if demo else kb_location, create=False, embedder=None)
    try:
        yield functools.cache(kb.document_version)
    finally:
        kb.close()


def stale_of(record: TraceRecord, kb_location: str | None, demo: bool) -> list[StaleSource]:
    """The documents ``record``'s answer cites that changed since; none when the knowledge
    base is gone (its traces may outlive it: then there is nothing to compare with)."""
    try:
        with current_versions(kb_location, demo) as version_of:
            return stale_sources(record, version_of)
    except click.ClickException:
        return []


def stale_line(stale: list[StaleSource]) -> str:
    """``library/os.html (edited), faq.md (removed)``."""
    return ", ".join(f"{s.source} ({s.change})" for s in stale)


def latest(store: TraceStorage, limit: int) -> list[TraceRecord]:
    try:
        return store.list(limit)
    except StoreError as error:  # a database that does not answer
        raise click.ClickException(str(error)) from None
    finally:
        store.close()


@click.group(name="traces")
def traces_group() -> None:
    """Look at the runs `ragloop ask` stored."""


@traces_group.command(name="list")
@kb_option
@demo_option
@click.option("--limit", "-n", type=click.IntRange(1, 10000), default=20, show_default=True)
@click.option(
    "--stale",
    is_flag=True,
    help="Only the runs whose answer cites a document edited or removed since it ran (the "
    "knowledge base's documents now against the versions the run read).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the traces as JSON.")
def list_traces(
    kb_location: str | None, demo: bool, limit: int, stale: bool, as_json: bool
) -> None:
    """The latest traces, newest first."""
    store = open_store(kb_location, demo)
    changed: dict[str, list[StaleSource]] = {}
    if stale:
        with current_versions(kb_location, demo) as version_of:
            found = list(islice(stale_runs(latest(store, RUNS_SCANNED), version_of), limit))
        records = [record for record, _ in found]
        changed = {record.id: what for record, what in found}
    else:
        records = latest(store, limit)
    if as_json:
        dumped = []
        for r in records:
            data = r.model_dump(mode="json", exclude={"events"})
            if stale:
                data["stale"] = [s.model_dump() for s in changed[r.id]]
            dumped.append(data)
        print_json(dumped)
        return
    if not records:
        nothing = "no stale runs" if stale else "no traces yet"
        console.print(f"{nothing} in {cell(store.location)}")
        return
    talks = any(isinstance(r.meta.get("conversation"), str) for r in records)
    rows = []
    for r in records:
        when = datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M")
        asked = r.meta.get("followup") or r.question  # a follow-up: the user's own words
        question = cell(shorten(str(asked), QUESTION_CHARS)) if asked else "[dim](not recorded)[/]"
        engine = str(r.meta.get("engine") or r.engine)
        stopped = cell(r.stop_reason or "-")
        cells = [cell(r.id[:12]), when, cell(engine)]
        cells += [conversation_cell(r.meta)] if talks else []
        cells += [question, str(r.iterations), stopped]
        rows.append(cells + ([cell(stale_line(changed[r.id]))] if stale else []))
    columns: list[Column | str] = ["id", "when", "engine"]
    columns += ["conversation"] if talks else []
    columns += ["question", Column("iterations", numeric=True), "stopped"]
    columns += ["changed since"] if stale else []
    print_table(console, columns, rows, title=store.location)
    if talks:
        console.print("[dim]ragloop ask -c QUESTION continues the newest conversation[/]")


def conversation_cell(meta: dict[str, Any]) -> str:
    """``1a2b3c4d5e6f #2``: the conversation a run is a turn of (``ragloop ask --conversation
    ID`` continues it), and which turn; ``-`` for a run outside any."""
    conversation, turn = meta.get("conversation"), meta.get("turn")
    if not isinstance(conversation, str):
        return "-"
    return cell(f"{conversation} #{turn}" if isinstance(turn, int) else conversation)


@traces_group.command()
@click.argument("trace_id")
@kb_option
@demo_option
@click.option("--json", "as_json", is_flag=True, help="Print the whole trace as JSON.")
def show(trace_id: str, kb_location: str | None, demo: bool, as_json: bool) -> None:
    """One trace (TRACE_ID or the start of it), step by step."""
    store = open_store(kb_location, demo)
    record = load(store, trace_id)
    stale = stale_of(record, kb_location, demo)
    if as_json:
        print_json(record.model_dump(mode="json") | {"stale": [s.model_dump() for s in stale]})
        return
    print_trace(console, record)
    if stale:
        line = cell(stale_line(stale))
        console.print(f"[yellow]stale:[/] the documents it cites changed since: {line}")


@traces_group.command()
@click.argument("trace_id")
@kb_option
@demo_option
@output_option("--html", "html_out", required=True, help="Write a self-contained HTML page here.")
def export(trace_id: str, kb_location: str | None, demo: bool, html_out: Path) -> None:
    """Write a trace as a self-contained HTML page (no scripts, nothing loaded)."""
    store = open_store(kb_location, demo)
    record = load(store, trace_id)
    html_out.write_text(render_html(record, stale_of(record, kb_location, demo)), encoding="utf-8")
    console.print(f"wrote {html_out}")


@traces_group.command()
@click.argument("trace_ids", nargs=-1)
@kb_option
@demo_option
@click.option("--last", type=click.IntRange(1, 100_000), default=None, help="The newest N runs.")
@click.option("--stale", is_flag=True, help="The runs whose cited documents changed since.")
@click.option(
    "--eval",
    "eval_set",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The questions of an eval set (JSONL with a 'question' field): each against its "
    "newest stored run; one never asked is run with --engine and reported new.",
)
@click.option(
    "--engine",
    type=click.Choice(["rag", "agent", "retrieval"]),
    default="rag",
    show_default=True,
    help="With --eval: the engine for questions no stored run asked.",
)
@output_option("--json", "json_out", help="Write the whole report as JSON.")
@output_option("--html", "html_out", help="Write the report as a self-contained HTML page.")
@click.option(
    "--set",
    "settings_given",
    multiple=True,
    metavar="KEY=VALUE",
    help="Replay with this loop setting instead of the recorded one, e.g. --set "
    "max_iterations=4 (repeatable): what a change of settings does.",
)
@click.option(
    "--model",
    "model_spec",
    default=None,
    help="Replay with this model instead of the recorded one ('offline': the offline components).",
)
@click.option(
    "--fail-under",
    type=click.FloatRange(0.0, 1.0),
    default=None,
    help="Exit 1 when the share of questions that did not get worse is below this (e.g. 0.95).",
)
def replay(
    trace_ids: tuple[str, ...],
    kb_location: str | None,
    demo: bool,
    last: int | None,
    stale: bool,
    eval_set: Path | None,
    engine: str,
    json_out: Path | None,
    html_out: Path | None,
    settings_given: tuple[str, ...],
    model_spec: str | None,
    fail_under: float | None,
) -> None:
    """Ask stored runs' questions again, with the same engine and settings (or those --set
    and --model give), against the knowledge base and configuration as they are now, and
    show what changed.

    Choose the runs by TRACE_IDS, --last N, --stale or --eval FILE. Each question comes out
    same, changed (answer or citations), better, worse (it no longer stands by its answer, its
    chance of being right fell by 0.1 or more, or it cites nothing now), failed or new."""
    # the engines load only for a replay: list and show start as fast as before
    from ragloop.cli.ask import build_engine
    from ragloop.cli.common import settings
    from ragloop.cli.demo import open_demo
    from ragloop.evaluation.datasets import load_dataset
    from ragloop.evaluation.replay import Keeping, replay_questions
    from ragloop.evaluation.replay import replay as replay_runs

    overrides = parse_settings(settings_given)  # a malformed --set fails before any work
    chosen = [bool(trace_ids), last is not None, stale, eval_set is not None]
    if sum(chosen) != 1:
        raise click.UsageError("choose the runs one way: TRACE_IDS, --last, --stale or --eval")
    questions = [q.question for q in load_dataset(eval_set).questions] if eval_set else None
    records = replay_records(kb_location, demo, trace_ids, last, stale, questions)
    kb = open_demo() if demo else open_kb(kb_location, create=False)
    configured = settings()
    model_options = configured.model.options()

    def make_engine(name: str, spec: str | None, options: dict[str, Any]) -> Any:
        if "target_precision" in overrides:  # one of the two stop rules, as ragloop ask
            options.pop("confidence_threshold", None)
        elif "confidence_threshold" in overrides:
            options.pop("target_precision", None)
        if model_spec is not None:
            spec = None if model_spec == "offline" else model_spec
        # the config's model options (a base URL, a key) go with the config's model only
        given = model_options if spec == configured.model.spec else {}
        return build_engine(name, kb, spec, {**options, **overrides}, given)

    def shown(done: ReplayedQuestion) -> None:
        errors.print(f"  {done.verdict:>7}  {cell(shorten(done.question, QUESTION_CHARS))}")

    # each replay is stored beside the runs it asked again: `traces show` opens it, and the
    # run it replayed is answered (no longer listed as stale)
    given: dict[str, Any] = {"kb": str(kb.path or "postgresql"), **overrides}
    if model_spec is not None:
        given["model"] = model_spec
    store = open_store(kb_location, demo)
    keeping = Keeping(store=store, meta=given, content=configured.traces.content)
    try:
        if questions is not None:
            report = replay_questions(
                questions, records, make_engine, engine=engine, on_question=shown, keeping=keeping
            )
        else:
            report = replay_runs(records, make_engine, on_question=shown, keeping=keeping)
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
    finally:
        kb.close()
        store.close()
    show_replay(report)
    stored = [q.after.trace_id for q in report.questions if q.after is not None]
    if stored:
        where = " --demo" if demo else f" --kb {kb_location}" if kb_location else ""
        console.print(
            f"[dim]each new run is stored: ragloop traces show {stored[-1][:12]}{cell(where)} "
            "opens the newest[/]"
        )
    if json_out is not None:
        json_out.write_text(report.model_dump_json(indent=2), encoding="utf-8")
        console.print(f"report written to {json_out}")
    if html_out is not None:
        from ragloop.evaluation.replay import render_html

        html_out.write_text(render_html(report), encoding="utf-8")
        console.print(f"page written to {html_out}")
    if fail_under is not None and report.not_worse < fail_under:
        errors.print(
            f"[red]failed:[/] {report.not_worse:.1%} of the questions did not get worse, "
            f"under --fail-under {fail_under:g}"
        )
        raise click.exceptions.Exit(1)


def replay_records(
    kb_location: str | None,
    demo: bool,
    trace_ids: tuple[str, ...],
    last: int | None,
    stale: bool,
    questions: list[str] | None = None,
) -> list[TraceRecord]:
    """The stored runs to replay, whole (events too: they say what each run spent), oldest
    first: by id, the newest ``last``, the stale ones, or the ones that asked ``questions``."""
    store = open_store(kb_location, demo)
    try:
        if trace_ids:
            listed_ids = list(trace_ids)
        elif last is not None:
            listed_ids = [r.id for r in store.list(last)]
        elif stale:
            with current_versions(kb_location, demo) as version_of:
                listed = stale_runs(store.list(RUNS_SCANNED), version_of)
                listed_ids = [r.id for r, _ in listed]
        else:
            asked = set(questions or ())
            listed_ids = [r.id for r in store.list(RUNS_SCANNED) if r.question in asked]
        records = [store.get(i) for i in listed_ids]
    except (TraceNotFound, TraceCorrupted, StoreError) as error:
        raise click.ClickException(str(error)) from None
    finally:
        store.close()
    return sorted(records, key=lambda r: r.started_at)


def show_replay(report: ReplayReport) -> None:
    """The questions that did not come out the same, then the counts."""
    rows = []
    for q in report.questions:
        if q.verdict == "same":
            continue
        before = q.before.stop_reason if q.before else "-"
        after = q.after.stop_reason if q.after else (q.error or "-")
        cited = " ".join([f"+{s}" for s in q.cited_gained] + [f"-{s}" for s in q.cited_lost])
        rows.append(
            [
                q.verdict,
                cell(shorten(q.question, QUESTION_CHARS)),
                cell(f"{before} -> {after}"),
                cell(cited or ("answer changed" if q.answer_changed else "")),
            ]
        )
    if rows:
        print_table(console, ["verdict", "question", "stopped", "citations"], rows)
    counts = ", ".join(f"{n} {verdict}" for verdict, n in report.counts.items() if n)
    console.print(
        f"replayed {len(report.questions)} question(s): {counts or 'none'}; "
        f"{report.not_worse:.1%} did not get worse"
    )

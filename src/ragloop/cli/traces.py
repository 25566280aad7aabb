"""ragloop traces ...: the stored runs of `ragloop ask`, listed, shown and exported."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from ragloop.cli.common import (
    console,
    kb_option,
    open_kb,
    open_traces,
    output_file,
    print_json,
)
from ragloop.cli.display import print_trace
from ragloop.cli.tables import Column, cell, print_table, shorten
from ragloop.core.errors import StoreError, TraceCorrupted, TraceNotFound
from ragloop.demo import demo_kb_path
from ragloop.observability.report_html import render_html
from ragloop.observability.staleness import StaleSource, VersionOf, stale_sources
from ragloop.observability.traces import TraceRecord, TraceStorage

F = TypeVar("F", bound=Callable[..., Any])
QUESTION_CHARS = 120  # of a question in the list; `traces show` and --json hold it whole
STALE_SCAN = 10_000  # the newest runs `traces list --stale` looks through


def demo_option(function: F) -> F:
    return click.option("--demo", is_flag=True, help="The demo knowledge base's traces.")(function)


def open_store(kb_location: str | None, demo: bool) -> TraceStorage:
    if kb_location is not None and demo:
        raise click.UsageError("--kb and --demo name two knowledge bases; give one")
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
        records = []
        with current_versions(kb_location, demo) as version_of:
            for record in latest(store, STALE_SCAN):
                if found := stale_sources(record, version_of):
                    changed[record.id] = found
                    records.append(record)
                    if len(records) == limit:
                        break
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
    rows = []
    for r in records:
        when = datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M")
        question = (
            cell(shorten(r.question, QUESTION_CHARS)) if r.question else "[dim](not recorded)[/]"
        )
        engine = str(r.meta.get("engine") or r.engine)
        stopped = cell(r.stop_reason or "-")
        cells = [cell(r.id[:12]), when, cell(engine), question, str(r.iterations), stopped]
        rows.append(cells + ([cell(stale_line(changed[r.id]))] if stale else []))
    columns: list[Column | str] = ["id", "when", "engine", "question"]
    columns += [Column("iterations", numeric=True), "stopped"]
    columns += ["changed since"] if stale else []
    print_table(console, columns, rows, title=store.location)


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
@click.option(
    "--html",
    "html_out",
    type=click.Path(path_type=Path),
    required=True,
    callback=output_file,
    help="Write a self-contained HTML page here.",
)
def export(trace_id: str, kb_location: str | None, demo: bool, html_out: Path) -> None:
    """Write a trace as a self-contained HTML page (no scripts, nothing loaded)."""
    store = open_store(kb_location, demo)
    record = load(store, trace_id)
    html_out.write_text(render_html(record, stale_of(record, kb_location, demo)), encoding="utf-8")
    console.print(f"wrote {html_out}")

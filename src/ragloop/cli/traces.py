"""ragloop traces ...: the stored runs of `ragloop ask`, listed, shown and exported."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from ragloop.cli.common import console, kb_option, open_traces, output_file, print_json
from ragloop.cli.display import print_trace
from ragloop.cli.tables import Column, cell, print_table, shorten
from ragloop.core.errors import StoreError, TraceCorrupted, TraceNotFound
from ragloop.demo import demo_kb_path
from ragloop.observability.report_html import render_html
from ragloop.observability.traces import TraceRecord, TraceStorage

F = TypeVar("F", bound=Callable[..., Any])
QUESTION_CHARS = 120  # of a question in the list; `traces show` and --json hold it whole


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
@click.option("--json", "as_json", is_flag=True, help="Print the traces as JSON.")
def list_traces(kb_location: str | None, demo: bool, limit: int, as_json: bool) -> None:
    """The latest traces, newest first."""
    store = open_store(kb_location, demo)
    records = latest(store, limit)
    if as_json:
        print_json([r.model_dump(mode="json", exclude={"events"}) for r in records])
        return
    if not records:
        console.print(f"no traces yet in {cell(store.location)}")
        return
    rows = []
    for r in records:
        when = datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M")
        question = (
            cell(shorten(r.question, QUESTION_CHARS)) if r.question else "[dim](not recorded)[/]"
        )
        engine = str(r.meta.get("engine") or r.engine)
        stopped = cell(r.stop_reason or "-")
        rows.append([cell(r.id[:12]), when, cell(engine), question, str(r.iterations), stopped])
    columns: list[Column | str] = ["id", "when", "engine", "question"]
    columns += [Column("iterations", numeric=True), "stopped"]
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
    if as_json:
        print_json(record.model_dump(mode="json"))
    else:
        print_trace(console, record)


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
    html_out.write_text(render_html(record), encoding="utf-8")
    console.print(f"wrote {html_out}")

"""ragloop ingest PATH...: files and folders into the knowledge base."""

from __future__ import annotations

from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ragloop.cli.common import (
    EMBEDDER_HELP,
    check_embedder,
    console,
    errors,
    kb_option,
    open_kb,
    print_json,
    shown_path,
)
from ragloop.cli.tables import Column, cell, print_table
from ragloop.core.errors import RagloopError
from ragloop.retrieval.ingest import IngestInterrupted, IngestReport


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@kb_option
@click.option("--collection", default="default", show_default=True, help="Collection to fill.")
@click.option("--sync", is_flag=True, help="Also remove documents whose files left the folders.")
@click.option(
    "--embedder", default="default", show_default=True, callback=check_embedder, help=EMBEDDER_HELP
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def ingest(
    paths: tuple[Path, ...],
    kb_location: str | None,
    collection: str,
    sync: bool,
    embedder: str,
    as_json: bool,
    quiet: bool,
) -> None:
    """Ingest files and folders (txt, md, rst, html, json, jsonl, csv, pdf)."""
    missing = [p for p in paths if not p.exists() and not p.is_symlink()]
    if missing:
        raise click.BadParameter(
            ", ".join(str(p) for p in missing), param_hint="PATHS (no such file or directory)"
        )
    kb = open_kb(kb_location, create=True, embedder=None if embedder == "none" else embedder)
    try:
        if kb.embedder is None and not quiet and not as_json:
            errors.print(f"[yellow]note:[/] keyword search only ({kb.dense_off_reason})")
        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=errors,
            disable=quiet or as_json,
            transient=True,
        ) as progress:
            task = progress.add_task("ingesting", total=None)

            def on_progress(done: int, total: int, note: str) -> None:
                progress.update(
                    task,
                    completed=done,
                    total=total,
                    description=f"ingesting {Path(note).name}" if note else "done",
                )

            report = kb.ingest(
                list(paths), collection=collection, on_progress=on_progress, sync=sync
            )
        where = str(kb.path) if kb.path is not None else kb.stats().path
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
    except IngestInterrupted as stop:
        saved = stop.report.added + stop.report.updated
        click.echo(
            f"interrupted: {saved} document(s) saved ({stop.report.added} added, "
            f"{stop.report.updated} updated) before it stopped; run the same command again "
            "to resume: saved documents are not read again",
            err=True,
        )
        raise click.exceptions.Exit(130) from None
    finally:
        kb.close()
    if as_json:
        print_json(report.model_dump())
    else:
        show_report(report, where)


def show_report(report: IngestReport, where: str | None) -> None:
    counts = (
        report.added,
        report.updated,
        report.unchanged,
        report.removed,
        len(report.skipped),
        report.chunks_added,
    )
    headers = ("added", "updated", "unchanged", "removed", "skipped", "chunks added")
    print_table(
        console,
        [Column(h, numeric=True) for h in headers],
        [[str(n) for n in counts]],
        title=f"ingested into {where}",
    )
    if report.skipped:
        rows = [[cell(shown_path(path)), cell(reason)] for path, reason in report.skipped]
        print_table(console, ["file", "reason"], rows, title="skipped")

"""ragloop ingest PATH...: files and folders into the knowledge base."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ragloop.cli.common import (
    EMBEDDER_HELP,
    check_embedder,
    console,
    errors,
    kb_option,
    open_kb,
    print_json,
    shown_path,
    warnings_shown,
)
from ragloop.cli.tables import Column, cell, print_table
from ragloop.core.errors import RagloopError
from ragloop.kb.ingest.discover import IngestInterrupted, IngestProgress, IngestReport

if TYPE_CHECKING:
    from ragloop.kb.knowledge_base import KnowledgeBase
    from ragloop.kb.watch import WatchBatch


@contextmanager
def progress_display(quiet: bool) -> Iterator[Callable[[IngestProgress], None]]:
    """A progress bar on stderr fed by :class:`IngestProgress`: files, then chunks embedded,
    with the rate and the time left (off with ``quiet``, and when stderr is not a terminal)."""
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[counts]}"),
        TextColumn("[dim]{task.fields[rate]}[/]"),
        TimeElapsedColumn(),
        console=errors,
        disable=quiet,
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=None, counts="", rate="")

        def show(state: IngestProgress) -> None:
            if state.phase == "reading":
                name = Path(state.source).name if state.source else ""
                description = f"reading {cell(name)}"  # markup, and a name may hold anything
                done, total = state.files_done, state.files_total
                counts = f"{done:,}/{total:,} files, {state.chunks_stored:,} chunks"
                unit = "files"
            elif state.phase == "indexing":  # the vector graph, at hundreds of thousands
                description = "indexing"
                done, total = state.vectors_indexed, state.vectors_to_index
                counts = f"{done:,}/{total:,} vectors" if total else ""
                unit = "vectors"
            else:
                description = "embedding" if state.phase == "embedding" else "done"
                done, total = state.chunks_embedded, state.chunks_to_embed
                counts = f"{done:,}/{total:,} chunks"
                unit = "chunks"
            rate = f"{state.rate:,.1f} {unit}/s" if state.rate else ""
            if state.eta_s is not None:
                minutes, seconds = divmod(round(state.eta_s), 60)
                rate += f", {minutes}:{seconds:02d} left"
            bar.update(
                task, description=description, completed=done, total=total or None,
                counts=counts, rate=rate,
            )  # fmt: skip

        yield show


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@kb_option
@click.option("--collection", default="default", show_default=True, help="Collection to fill.")
@click.option("--sync", is_flag=True, help="Also remove documents whose files left the folders.")
@click.option(
    "--embedder", default="default", show_default=True, callback=check_embedder, help=EMBEDDER_HELP
)
@click.option(
    "--vectors",
    type=click.Choice(["now", "later"]),
    default="now",
    show_default=True,
    help="later: store the text only (keyword search works at once); "
    "'ragloop kb embed' adds the vectors.",
)
@click.option(
    "--links/--no-links",
    default=True,
    show_default=True,
    help="Record which chunks mention other documents' titles and headings (the links "
    "multi-hop loops follow); --no-links ingests faster.",
)
@click.option(
    "--watch",
    is_flag=True,
    help="Then keep the collection in step with the paths: new, edited, renamed and deleted "
    "files are applied as they change, a line each batch (a JSON line with --json); Ctrl-C "
    "stops.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@warnings_shown()
def ingest(
    paths: tuple[Path, ...],
    kb_location: str | None,
    collection: str,
    sync: bool,
    embedder: str,
    vectors: str,
    links: bool,
    watch: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Ingest files and folders (txt, md, rst, html, json, jsonl, csv, pdf).

    The text is stored first, so keyword search works while the chunks are embedded."""
    missing = [p for p in paths if not p.exists() and not p.is_symlink()]
    if missing:
        raise click.BadParameter(
            ", ".join(str(p) for p in missing), param_hint="PATHS (no such file or directory)"
        )
    if not watch and not sync:  # nothing to read is an error, before a knowledge base is made
        nothing_to_read(paths)
    kb = open_kb(kb_location, create=True, embedder=None if embedder == "none" else embedder)
    kb.link_titles = links
    try:
        if kb.embedder is None and not quiet and not as_json:
            errors.print(f"[yellow]note:[/] keyword search only ({kb.dense_off_reason})")
        with progress_display(quiet or as_json) as show:
            report = kb.ingest(
                list(paths),
                collection=collection,
                on_progress=show,
                sync=sync,
                vectors="later" if vectors == "later" else "now",
            )
        where = str(kb.path) if kb.path is not None else kb.stats().path
        if as_json:  # with --watch, one line: the batches follow as JSON lines
            print_json(report.model_dump(), indent=None if watch else 2)
        else:
            show_report(report, where, kb_location)
        if not watch and not report.documents and not report.removed:
            skipped = len(report.skipped)
            raise click.ClickException(
                f"no file could be read in {shown_paths(paths)}: {skipped} skipped, each with "
                "its reason in the report"
            )
        if watch:
            watch_paths(kb, paths, collection, vectors, as_json)
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


def shown_paths(paths: Sequence[Path]) -> str:
    return cell(", ".join(shown_path(str(p)) for p in paths))


def nothing_to_read(paths: Sequence[Path]) -> None:
    """Fail (exit 1) when ``paths`` hold no file ingest reads, saying what was passed over:
    an ingest that reads nothing is not a success (and makes no knowledge base)."""
    from ragloop.kb.ingest.discover import discover

    found = discover(list(paths))
    if found.found:
        return
    passed = "; ".join(f"{shown_path(path)}: {reason}" for path, reason in found.skipped[:3])
    more = len(found.skipped) - 3
    detail = f" (skipped {passed}{f' and {more} more' if more > 0 else ''})" if passed else ""
    raise click.ClickException(
        f"no file to read in {shown_paths(paths)}{cell(detail)}; ingest reads txt, md, rst, "
        "html, json, jsonl, csv and pdf files"
    )


def watch_paths(
    kb: KnowledgeBase, paths: Sequence[Path], collection: str, vectors: str, as_json: bool
) -> None:
    """Apply changes under ``paths`` until Ctrl-C: a line per batch (a JSON line with
    ``as_json``), then how many batches were applied."""
    from ragloop.kb.watch import FolderWatcher  # watchfiles: only when watching

    watcher = FolderWatcher(
        kb, paths, collection=collection, vectors="later" if vectors == "later" else "now"
    )
    shown = ", ".join(shown_path(str(p)) for p in watcher.paths)
    errors.print(f"watching {cell(shown)} for changes (Ctrl-C stops)")
    applied = 0
    try:
        for batch in watcher.batches():
            applied += 1
            if as_json:
                print_json(batch.model_dump(mode="json"), indent=None)
            else:
                console.print(batch_line(batch))
                for path, reason in batch.report.skipped:
                    console.print(f"  skipped {cell(shown_path(path))}: {cell(reason)}")
    except KeyboardInterrupt:  # while waiting; during a batch, IngestInterrupted says more
        pass
    errors.print(f"stopped watching: {applied} batch(es) applied")


def batch_line(batch: WatchBatch) -> str:
    """One line for a batch: when, what it did, how long it took."""
    r = batch.report
    when = batch.at.astimezone().strftime("%H:%M:%S")
    if batch.error:
        return f"{when} [red]error[/]: {cell(batch.error)} (the next change retries)"
    done = [
        f"{n} {what}"
        for n, what in (
            (r.added, "added"),
            (r.updated, "updated"),
            (r.removed, "removed"),
            (len(r.skipped), "skipped"),
        )
        if n
    ] or ["nothing to change"]
    what = "sync" if batch.full else f"{len(batch.changed) + len(batch.removed)} change(s)"
    return f"{when} {what}: {', '.join(done)} ({batch.seconds:.2f} s)"


def show_report(report: IngestReport, where: str | None, kb_location: str | None) -> None:
    counts = (
        report.added,
        report.updated,
        report.unchanged,
        report.removed,
        len(report.skipped),
        report.chunks_added,
        report.chunks_embedded,
    )
    headers = ("added", "updated", "unchanged", "removed", "skipped", "chunks added", "embedded")
    print_table(
        console,
        [Column(h, numeric=True) for h in headers],
        [[str(n) for n in counts]],
        title=f"ingested into {where}",
    )
    if report.vectors_missing:
        where_option = f" --kb {kb_location}" if kb_location else ""
        console.print(
            f"{report.vectors_missing} chunks have no vector yet: keyword search finds them "
            f"now, hybrid search once 'ragloop kb embed{where_option}' has run"
        )
    if report.skipped:
        rows = [[cell(shown_path(path)), cell(reason)] for path, reason in report.skipped]
        print_table(console, ["file", "reason"], rows, title="skipped")

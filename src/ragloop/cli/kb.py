"""ragloop kb ...: look after the knowledge base."""

from __future__ import annotations

import click

from ragloop.cli.common import console, kb_option, open_kb, print_json
from ragloop.cli.ingest import progress_display
from ragloop.cli.tables import Column, cell, print_table
from ragloop.core.errors import RagloopError


@click.group(name="kb")
def kb_group() -> None:
    """Inspect and manage the knowledge base."""


@kb_group.command()
@kb_option
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def stats(kb_location: str | None, as_json: bool) -> None:
    """Documents, chunks, vectors, links and collections."""
    kb = open_kb(kb_location, create=False)
    try:
        info = kb.stats()
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
    finally:
        kb.close()
    if as_json:
        print_json(info.model_dump())
        return
    size = f"{info.size_bytes / 1e6:.1f} MB" if info.size_bytes is not None else "-"
    model = f"{info.embedding_model} ({info.dimension}-d)" if info.embedding_model else "none"
    rows = [
        ("documents", info.documents),
        ("chunks", info.chunks),
        ("vectors", info.vectors),
        ("chunks without a vector", info.vectors_missing if info.dense else "-"),
        ("links", info.links),
        ("embedding model", model),
        ("dense search", "on" if info.dense else f"off: {info.dense_off_reason}"),
        ("size", size),
    ]
    print_table(
        console,
        ["what", "value"],
        [[what, cell(value)] for what, value in rows],
        title=str(info.path or "in memory"),
        show_header=False,
    )
    if info.collections:
        print_table(
            console,
            ["collection", Column("documents", numeric=True), Column("chunks", numeric=True)],
            [[cell(c.name), str(c.documents), str(c.chunks)] for c in info.collections],
            title="collections",
        )


@kb_group.command()
@click.argument("source")
@kb_option
@click.option("--collection", default=None, help="Only from this collection.")
def delete(source: str, kb_location: str | None, collection: str | None) -> None:
    """Remove a document (by its path) from the knowledge base."""
    kb = open_kb(kb_location, create=False)
    try:
        removed = kb.delete(source, collection=collection)
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
    finally:
        kb.close()
    if not removed:
        raise click.ClickException(f"no document {source!r} in the knowledge base")
    console.print(f"removed {removed} document(s)")


@kb_group.command()
@kb_option
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def embed(kb_location: str | None, quiet: bool) -> None:
    """Embed the chunks stored without a vector (ingest --vectors later, or an ingest that was
    stopped). Each batch is saved as it is done: stopped, it goes on from there next time."""
    kb = open_kb(kb_location, create=False)
    try:
        with progress_display(quiet) as show:
            done = kb.embed(on_progress=show)
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
    except KeyboardInterrupt:
        click.echo("stopped: what was embedded is saved; run it again to go on", err=True)
        raise click.exceptions.Exit(130) from None
    finally:
        kb.close()
    console.print(f"embedded {done:,} chunks" if done else "every chunk has its vector")

"""ragloop search QUERY: the best chunks for a query."""

from __future__ import annotations

import click

from ragloop.cli.common import (
    console,
    errors,
    kb_option,
    open_kb,
    print_json,
    shown_path,
    text_argument,
)
from ragloop.cli.demo import open_demo
from ragloop.cli.tables import Column, cell, print_table
from ragloop.core.errors import RagloopError
from ragloop.kb.knowledge_base import SEARCH_MODES


@click.command()
@click.argument("query")
@kb_option
@click.option("--mode", type=click.Choice(SEARCH_MODES), default="hybrid", show_default=True)
@click.option("--top-k", "-k", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.option("--collection", "-c", multiple=True, help="Search only this collection (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the chunks as JSON.")
@click.option("--demo", is_flag=True, help="Search the demo knowledge base (built on first use).")
def search(
    query: str,
    kb_location: str | None,
    mode: str,
    top_k: int,
    collection: tuple[str, ...],
    as_json: bool,
    demo: bool,
) -> None:
    """Search the knowledge base for QUERY ("-" reads it from standard input)."""
    query = text_argument(query, "query")
    if kb_location is not None and demo:
        raise click.UsageError("--kb and --demo name two knowledge bases; give one")
    kb = open_demo() if demo else open_kb(kb_location, create=False)
    try:
        if mode != "bm25" and kb.embedder is None and not as_json:
            errors.print(f"[yellow]note:[/] keyword search only ({kb.dense_off_reason})")
        chunks = kb.search(
            query,
            top_k=top_k,
            mode=mode,  # type: ignore[arg-type]
            collection=list(collection) or None,
        )
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
    finally:
        kb.close()
    if as_json:
        print_json([chunk.model_dump() for chunk in chunks])
        return
    if not chunks:
        console.print("no results")
        return
    rows = []
    for rank, chunk in enumerate(chunks, 1):
        title = chunk.metadata.get("title") or ""
        heading = " > ".join(chunk.metadata.get("heading_path") or [])
        where = f"{cell(shown_path(chunk.source))}\n[dim]{cell(heading or title)}[/]"
        text = chunk.content if len(chunk.content) <= 300 else chunk.content[:299] + "…"
        rows.append([str(rank), f"{chunk.score:.3f}", where, cell(text)])
    columns: list[Column | str] = [
        Column("#", numeric=True),
        Column("score", numeric=True),
        "source",
        "text",
    ]
    print_table(console, columns, rows)

"""What every command shares: where the knowledge base is, opening it, printing."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import platformdirs
from rich.console import Console

from ragloop.core.errors import RagloopError
from ragloop.retrieval.knowledge_base import KnowledgeBase
from ragloop.retrieval.store import is_postgres_dsn

F = TypeVar("F", bound=Callable[..., Any])

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


def default_kb_location() -> str:
    """$RAGLOOP_KB (a file or a postgresql:// URL), else kb.sqlite in the user's data folder."""
    env = os.environ.get("RAGLOOP_KB")
    if env:
        return env
    return str(Path(platformdirs.user_data_dir("ragloop")) / "kb.sqlite")


def kb_option(function: F) -> F:
    return click.option(
        "--kb",
        "kb_location",
        default=None,
        metavar="FILE|URL",
        help="Knowledge base: a file, or a PostgreSQL URL postgresql://user@host/db "
        "(default: $RAGLOOP_KB, else kb.sqlite in the user data folder).",
    )(function)


def open_kb(
    location: str | None, *, create: bool, embedder: str | None = "default"
) -> KnowledgeBase:
    """Open the knowledge base (a file, or PostgreSQL for a postgresql:// or postgres:// URL),
    turning ragloop errors into clean CLI errors. Read commands pass ``create=False``: a
    missing knowledge base is an error, never silently created."""
    location = location or default_kb_location()
    try:
        if is_postgres_dsn(location):  # imported here: psycopg is slow to import
            from ragloop.retrieval.store_postgres import PostgresKnowledgeBase

            return PostgresKnowledgeBase(location, create=create, embedder=embedder)
        return KnowledgeBase(Path(location).expanduser(), create=create, embedder=embedder)
    except RagloopError as error:
        raise click.ClickException(str(error)) from None


def traces_file(location: str | None) -> Path:
    """Where ``ragloop ask`` stores the traces of a knowledge base: beside its file
    (``kb.sqlite`` -> ``kb.traces.sqlite``), or, for PostgreSQL, in the user data folder under
    a name derived from the URL without its password."""
    from ragloop.observability.traces import traces_path_for

    location = location or default_kb_location()
    if not is_postgres_dsn(location):
        return traces_path_for(Path(location).expanduser())
    safe = re.sub(r"//([^:@/]*):[^@/]*@", r"//\1@", location)
    digest = hashlib.sha256(safe.encode()).hexdigest()[:12]
    return Path(platformdirs.user_data_dir("ragloop")) / f"postgres-{digest}.traces.sqlite"


def shown_path(source: str) -> str:
    """A source path relative to the working directory when it lies inside it."""
    try:
        return str(Path(source).relative_to(Path.cwd()))
    except ValueError:
        return source


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))

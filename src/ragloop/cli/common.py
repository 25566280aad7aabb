"""What every command shares: where the knowledge base is, opening it, printing."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from ragloop.cli.tables import CONTROLS
from ragloop.core.errors import ConfigError, RagloopError
from ragloop.core.files import is_postgres_dsn
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.kb.metadata import public_metadata

if TYPE_CHECKING:
    from ragloop.config import Settings
    from ragloop.observability.traces import TraceStorage

F = TypeVar("F", bound=Callable[..., Any])

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


class _WarningLine(logging.Handler):
    """A ragloop warning as one line on stderr (the reason, never a traceback)."""

    def emit(self, record: logging.LogRecord) -> None:
        message = escape(record.getMessage())
        errors.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)


@contextlib.contextmanager
def warnings_shown() -> Iterator[None]:
    """Show what the library warns of (a cache or trace it could not write) while a command
    runs, one line each: a library logs to ``ragloop`` and shows nothing by itself. pypdf's
    own notes on the PDFs it reads ("EOF marker not found") are not shown: a PDF it cannot
    read is a skipped file, with its reason, in the command's report."""
    handler = _WarningLine(logging.WARNING)
    logger = logging.getLogger("ragloop")
    pdf = logging.getLogger("pypdf")
    level = pdf.level
    logger.addHandler(handler)
    pdf.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        pdf.setLevel(level)


def default_kb_location() -> str:
    """The knowledge base when ``--kb`` is not given (:func:`ragloop.config.default_kb_location`);
    a bad config file is a clean error."""
    from ragloop.config import default_kb_location as configured

    try:
        return configured()
    except ConfigError as error:
        raise InputError(f"config: {error}") from None


def settings() -> Settings:
    """The effective settings (ragloop.toml and the environment); a bad one is a clean error."""
    from ragloop.config import load_settings  # read when needed: `search --kb FILE` never is

    try:
        return load_settings()
    except ConfigError as error:
        raise InputError(f"config: {error}") from None


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
    missing knowledge base is an error, never silently created; a file created here is removed
    again when opening it fails (an embedder that cannot load leaves nothing behind)."""
    location = location or default_kb_location()
    if is_postgres_dsn(location):
        from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase  # psycopg: slow import

        options = settings().kb.postgres.store_options()  # [kb.postgres] of ragloop.toml
        try:
            return PostgresKnowledgeBase(location, create=create, embedder=embedder, **options)
        except RagloopError as error:
            raise click.ClickException(str(error)) from None
    file = Path(location).expanduser()
    existed = file.exists()
    try:
        return KnowledgeBase(file, create=create, embedder=embedder)
    except RagloopError as error:
        if not existed:
            for leftover in (file, Path(f"{file}-wal"), Path(f"{file}-shm")):
                leftover.unlink(missing_ok=True)
        raise click.ClickException(str(error)) from None


# -- what commands are given --------------------------------------------------------------------


class InputError(click.ClickException):
    """Bad input, refused before any work: one line on stderr, exit status 2 (as a usage
    error), no traceback."""

    exit_code = 2


def _option(param: click.Parameter) -> str:
    return param.opts[0] if param.opts else (param.name or "value")


EMBEDDER_HELP = (
    "default, minilm, e5, hash, hash-DIM, none (keyword search only), or a provider spec"
)


def check_embedder(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """An ``--embedder`` name ragloop knows, refused before any work otherwise."""
    from ragloop.kb.embedding.embedders import EMBEDDERS, MODEL_IDS

    name = MODEL_IDS.get(value, value)
    hashed = name.startswith("hash-") and name[5:].isdigit()
    if name in ("default", "none", *EMBEDDERS) or hashed or ":" in name:
        return value
    known = ", ".join(["default", *EMBEDDERS, "hash-DIM", "none"])
    raise InputError(f"{_option(param)}: unknown embedder {value!r}; choose from {known}")


def text_argument(value: str, what: str) -> str:
    """A query or question argument: ``-`` reads it from standard input (for text longer than a
    command line may hold); blank text is refused before any work."""
    if value == "-":
        value = sys.stdin.read()
    if not value.strip():
        raise InputError(f"the {what} is empty")
    return value


def output_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """An output file option, checked before any work: its folder must exist and be writable,
    so a long run never fails at its very end."""
    if value is None:
        return None
    path = value.expanduser()
    folder = path.parent
    where = _option(param)
    if not folder.is_dir():
        raise InputError(f"{where}: the folder {str(folder)!r} does not exist")
    if path.is_dir():
        raise InputError(f"{where}: {str(path)!r} is a folder")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{where}: {str(path)!r} cannot be written")
    return path


def output_option(*names: str, help: str, required: bool = False) -> Callable[[F], F]:
    """An option naming a file the command writes (checked by :func:`output_file` before any
    work)."""
    return click.option(
        *names,
        type=click.Path(path_type=Path),
        default=None,
        required=required,
        callback=output_file,
        help=help,
    )


def open_traces(location: str | None) -> TraceStorage:
    """The trace store of the knowledge base at ``location`` (else of the default one), where
    ``ragloop ask`` stores its runs: :func:`ragloop.config.kb_traces_location` (a file beside
    a SQLite knowledge base, the database of a PostgreSQL one). Nothing is opened yet."""
    from ragloop.config import kb_traces_location
    from ragloop.observability.trace_stores import open_trace_store

    try:
        return open_trace_store(kb_traces_location(location or default_kb_location()))
    except RagloopError as error:  # the postgres extra is missing
        raise click.ClickException(str(error)) from None


def shown_path(source: str) -> str:
    """A source path relative to the working directory when it lies inside it."""
    try:
        return str(Path(source).relative_to(Path.cwd()))
    except ValueError:
        return source


def print_json(data: Any, *, indent: int | None = 2) -> None:
    """``data`` as JSON, each chunk's metadata as clients see it (:func:`public_metadata`);
    the control characters JSON leaves as they are (DEL, C1) written as ``\\u`` escapes too,
    so the output is the same JSON and safe in a terminal. ``indent=None``: one line (JSON
    Lines, for a stream of records)."""
    text = json.dumps(_public_chunks(data), indent=indent, ensure_ascii=False, default=str)
    click.echo(CONTROLS.sub(lambda found: f"\\u{ord(found.group()):04x}", text))


def _public_chunks(data: Any) -> Any:
    """``data`` (dumped records) with each chunk's metadata (a dict holding ``content`` and
    ``metadata``) reduced to :func:`public_metadata`."""
    if isinstance(data, list):
        return [_public_chunks(item) for item in data]
    if not isinstance(data, dict):
        return data
    shown = {key: _public_chunks(value) for key, value in data.items()}
    if "content" in shown and isinstance(shown.get("metadata"), dict):
        shown["metadata"] = public_metadata(shown["metadata"])
    return shown


def parse_settings(settings: tuple[str, ...]) -> dict[str, object]:
    """``--set KEY=VALUE`` options as settings: numbers and true/false read as such."""
    parsed: dict[str, object] = {}
    for item in settings:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--set")
        value: object = raw
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        parsed[key.strip()] = value
    return parsed

"""ragloop serve: the HTTP API, its web page and MCP, over the knowledge base of the config.

``--workers N`` (``[server] workers``) runs N processes on one socket, bound here first (a
busy port is one clear error), under uvicorn's supervisor, which restarts a worker that dies.
Each worker builds its app with :func:`worker_app` from the settings this command resolved,
handed down as the environment ``ragloop.toml`` already reads (``RAGLOOP_KB``,
``RAGLOOP_SERVER__*``, ``RAGLOOP_CONFIG``). Over SQLite the workers share the knowledge base
and trace files (WAL); the per-key run limit is then each worker's own, as ``/healthz`` says.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ragloop.cli import config_option
from ragloop.cli.common import default_kb_location, errors, kb_option, open_kb, settings
from ragloop.cli.ingest import batch_line
from ragloop.core.errors import ConfigError, RagloopError
from ragloop.core.files import is_postgres_dsn
from ragloop.kb.knowledge_base import KnowledgeBase

if TYPE_CHECKING:
    from ragloop.config import ServerSettings, Settings

DEMO_HELP = "Serve the demo knowledge base (built on first use) instead of --kb."


def need_server_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise click.ClickException(
            'ragloop serve needs the server extra: pip install "ragloop[server]"'
        ) from None


def exposure_warning(host: str, *, has_keys: bool) -> str | None:
    """What to say when the server is bound beyond this machine without API keys."""
    from ragloop.server.access import is_loopback

    if has_keys or is_loopback(host):
        return None
    return (
        f"bound to {host} with no API keys: only requests from this machine are answered; "
        "add [server.keys.NAME] to ragloop.toml (ragloop config new-key) to serve others"
    )


def served_kb(
    kb_location: str | None,
    *,
    demo: bool,
    location: str | None,
    embedder: str | None,
    new_schema: bool = False,
) -> KnowledgeBase:
    """The knowledge base a server serves: the demo's, or an existing one at ``location`` (a
    missing file is refused, never created empty: a typo in --kb must not serve an empty
    knowledge base). ``kb_location`` is what --kb gave, refused beside --demo. ``new_schema``:
    a PostgreSQL database without ragloop's tables gets them (a fresh deployment)."""
    if demo:
        if kb_location is not None:
            raise click.UsageError("--kb and --demo name two knowledge bases; give one")
        from ragloop.cli.demo import open_demo

        return open_demo()
    location = location or default_kb_location()
    # a PostgreSQL database exists already (a typo cannot connect), and a fresh deployment of
    # `ragloop serve` makes its tables (docs/docker-compose.yml); a missing file is a typo
    create = new_schema and is_postgres_dsn(location)
    try:
        return open_kb(location, create=create, embedder=embedder)
    except click.ClickException as error:
        hint = "or --demo serves the demo knowledge base"
        raise click.ClickException(f"{error.message}; {hint}") from None


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything says the server is up: a busy port is a
    clear error and a non-zero exit, not a line "serving on ..." followed by a traceback."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as error:
        where = f"{host}:{port}"
        if error.errno == errno.EADDRINUSE:
            reason = f"port {port} is in use on {host} (another server?); give --port"
        elif error.errno in (errno.EACCES, errno.EPERM):
            reason = f"no permission to listen on {where}; give a port above 1023"
        else:
            reason = f"cannot listen on {where}: {error.strerror or error}"
        raise click.ClickException(reason) from None


def run_workers(sock: socket.socket, workers: int) -> None:
    """``workers`` processes of :func:`worker_app` serving the bound socket, under uvicorn's
    supervisor (Ctrl-C or SIGTERM stops them all)."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    # an import string, not the class the one-process server is given: the config is sent to
    # each worker, and a class made at run time does not travel; the worker sets its timeout
    config = uvicorn.Config(
        f"{__name__}:worker_app",
        factory=True,
        workers=workers,
        log_level="warning",
        http="ragloop.server.protocol:TimeoutProtocol",
    )
    try:
        if "target" in inspect.signature(Multiprocess).parameters:  # an older uvicorn
            server = uvicorn.Server(config)
            Multiprocess(config, target=server.run, sockets=[sock]).run()  # type: ignore[call-arg]
        else:
            Multiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()


def worker_app() -> Any:
    """The app of one worker process of ``ragloop serve --workers N``: the knowledge base and
    settings the command resolved (in this process's environment), served until the worker
    stops. A worker that cannot start exits as uvicorn's startup failure, so the supervisor
    stops instead of starting it again and again."""
    from uvicorn.config import STARTUP_FAILURE

    from ragloop.config import load_settings
    from ragloop.server.app import create_app
    from ragloop.server.protocol import TimeoutProtocol
    from ragloop.server.service import Service

    try:
        configured = load_settings()
        show_access_log(configured.server.access_log)
        TimeoutProtocol.header_timeout_s = configured.server.header_timeout_s
        TimeoutProtocol.body_timeout_s = configured.server.body_timeout_s
        kb = served_kb(
            None, demo=False, location=configured.kb.location, embedder=configured.kb.embedder
        )
        service = Service(kb, configured)
    except (click.ClickException, RagloopError) as error:
        message = error.message if isinstance(error, click.ClickException) else str(error)
        logging.getLogger("ragloop.server").error("a worker could not start: %s", message)
        sys.exit(STARTUP_FAILURE)

    def close() -> None:
        service.close()
        kb.close()

    return create_app(service, on_shutdown=close)


def show_access_log(enabled: bool) -> None:
    """The server's access log (``ragloop.access``: a line per request) on stderr, each line
    with the time, unless ``[server] access_log = false``."""
    log = logging.getLogger("ragloop.access")
    if not enabled or any(getattr(h, "ragloop_access", False) for h in log.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    handler.ragloop_access = True  # type: ignore[attr-defined]  # installed once per process
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


@contextlib.contextmanager
def stopped_by_ctrl_c(what: str) -> Iterator[None]:
    """Ctrl-C stops the server: one short line and exit status 0, not click's "Aborted!"."""
    try:
        yield
    except KeyboardInterrupt:
        errors.print(f"{what} stopped")


def hand_down(settings: Settings, location: str) -> None:
    """Put what this command resolved where the workers' :func:`load_settings` reads it."""
    from ragloop.config import config_path

    chosen = config_path()
    if chosen is not None:
        os.environ["RAGLOOP_CONFIG"] = str(chosen)
    os.environ["RAGLOOP_KB"] = location
    server = settings.server
    os.environ["RAGLOOP_SERVER__MCP"] = "true" if server.mcp else "false"
    os.environ["RAGLOOP_SERVER__WORKERS"] = str(server.workers)


def run_server(app: Any, sock: socket.socket, server: ServerSettings) -> None:
    """uvicorn serving ``app`` on the bound socket, with ragloop's protocol options (the
    ``[server]`` header and body timeouts)."""
    import uvicorn

    from ragloop.server.protocol import uvicorn_options

    options = uvicorn_options(server.header_timeout_s, server.body_timeout_s)
    config = uvicorn.Config(app, log_level="warning", **options)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


def shown_url(sock: socket.socket, path: str = "/") -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"


@click.command()
@config_option
@kb_option
@click.option("--demo", is_flag=True, help=DEMO_HELP)
@click.option("--host", default=None, help="Address to bind (default: [server] host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Port (default 8000).")
@click.option("--no-mcp", is_flag=True, help="Do not serve MCP at /mcp.")
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Processes serving the port (default: [server] workers, 1).",
)
@click.option(
    "--target-precision",
    type=click.FloatRange(0.0, 1.0),
    default=None,
    help="Stand by an answer only at this calibrated chance of being right (default: "
    "[engine] target_precision, else the engine's own; a request's target_precision wins).",
)
@click.option(
    "--watch",
    "watched",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Keep the knowledge base in step with this folder or file while serving: synced "
    "when the server starts, then new, edited, renamed and deleted files as they change "
    "(repeatable).",
)
@click.option(
    "--watch-collection",
    default="default",
    show_default=True,
    help="The collection --watch keeps in step.",
)
def serve(
    kb_location: str | None,
    demo: bool,
    host: str | None,
    port: int | None,
    no_mcp: bool,
    workers: int | None,
    target_precision: float | None,
    watched: tuple[Path, ...],
    watch_collection: str,
) -> None:
    """Serve the HTTP API, its web page and MCP (needs ragloop[server]).

    The page is at /, the API under /v1 (OpenAPI docs at /docs), an OpenAI-compatible
    /v1/chat/completions, MCP over streamable HTTP at /mcp. Settings come from ragloop.toml
    ([server], [kb], [engine], [model], [budget]); without API keys only this machine is served.
    """
    need_server_extra()
    from ragloop.server.access import check_cors
    from ragloop.server.app import create_app
    from ragloop.server.service import Service

    configured = settings()
    server = configured.server.model_copy(
        update={
            "host": host or configured.server.host,
            "port": configured.server.port if port is None else port,
            "mcp": configured.server.mcp and not no_mcp,
            "workers": configured.server.workers if workers is None else workers,
        }
    )
    try:
        check_cors(server)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    configured = configured.model_copy(update={"server": server})
    if target_precision is not None:
        engine = configured.engine.model_copy(update={"target_precision": target_precision})
        configured = configured.model_copy(update={"engine": engine})
    location = kb_location or configured.kb.location
    if location != configured.kb.location:
        configured = configured.model_copy(
            update={"kb": configured.kb.model_copy(update={"location": location})}
        )
    kb = served_kb(
        kb_location,
        demo=demo,
        location=location,
        embedder=configured.kb.embedder,
        new_schema=True,
    )
    try:
        sock = bind(server.host, server.port)
    except click.ClickException:
        kb.close()
        raise
    warning = exposure_warning(server.host, has_keys=bool(server.keys))
    if warning is not None:
        errors.print(f"[yellow]warning:[/] {warning}")
    if server.workers > 1:
        # the watch writes through this process's knowledge base; workers read the same file
        stop_watching = start_watch(kb, watched, watch_collection) if watched else None
        # opened here to refuse a missing knowledge base (and make a new database's tables)
        # once, before any worker starts; each worker opens its own
        served = str(kb.path) if kb.path is not None else (location or default_kb_location())
        if stop_watching is None:
            kb.close()
        hand_down(configured, served)
        errors.print(
            f"ragloop serving on {shown_url(sock)} with {server.workers} workers (Ctrl-C stops)"
        )
        try:
            with stopped_by_ctrl_c("ragloop serve"):
                run_workers(sock, server.workers)
        finally:
            if stop_watching is not None:
                stop_watching()
                kb.close()
        return
    service = Service(kb, configured)
    stop_watching = (
        start_watch(kb, watched, watch_collection, changed=service.documents_changed)
        if watched
        else None
    )
    errors.print(f"ragloop serving on {shown_url(sock)} (Ctrl-C stops)")
    show_access_log(server.access_log)
    try:
        with stopped_by_ctrl_c("ragloop serve"):
            run_server(create_app(service), sock, server)
    finally:
        if stop_watching is not None:
            stop_watching()
        service.close()
        kb.close()


def start_watch(
    kb: KnowledgeBase,
    paths: Sequence[Path],
    collection: str,
    *,
    changed: Callable[[str, Sequence[str]], None] | None = None,
) -> Callable[[], None]:
    """Watch ``paths`` in a thread, a line on stderr per batch, each batch's documents given to
    ``changed`` (the service's MCP notifications); returns what stops it."""
    from ragloop.kb.watch import FolderWatcher  # watchfiles: only when watching

    watcher = FolderWatcher(kb, paths, collection=collection)
    stop = threading.Event()

    def run() -> None:
        for batch in watcher.batches(stop):
            errors.print(f"watch: {batch_line(batch)}")
            if changed is not None and batch.sources:
                changed(collection, batch.sources)

    thread = threading.Thread(target=run, name="ragloop-watch", daemon=True)
    thread.start()
    shown = ", ".join(str(p) for p in watcher.paths)
    errors.print(f"watching {shown} into collection {collection!r}")

    def stop_watching() -> None:
        stop.set()
        thread.join(timeout=10)  # a batch under way finishes: its transaction is not cut

    return stop_watching

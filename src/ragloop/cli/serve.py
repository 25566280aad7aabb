"""ragloop serve: the HTTP API, its web page and MCP, over the knowledge base of the config."""

from __future__ import annotations

import errno
import socket
from typing import Any

import click

from ragloop.cli import config_option
from ragloop.cli.common import default_kb_location, errors, kb_option, open_kb, settings
from ragloop.core.files import is_postgres_dsn
from ragloop.kb.knowledge_base import KnowledgeBase

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


def run_server(app: Any, sock: socket.socket, *, header_timeout_s: float) -> None:
    """uvicorn serving ``app`` on the bound socket, with ragloop's protocol options."""
    import uvicorn

    from ragloop.server.protocol import uvicorn_options

    config = uvicorn.Config(app, log_level="warning", **uvicorn_options(header_timeout_s))
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
def serve(
    kb_location: str | None, demo: bool, host: str | None, port: int | None, no_mcp: bool
) -> None:
    """Serve the HTTP API, its web page and MCP (needs ragloop[server]).

    The page is at /, the API under /v1 (OpenAPI docs at /docs), an OpenAI-compatible
    /v1/chat/completions, MCP over streamable HTTP at /mcp. Settings come from ragloop.toml
    ([server], [kb], [engine], [model], [budget]); without API keys only this machine is served.
    """
    need_server_extra()
    from ragloop.server.app import create_app
    from ragloop.server.service import Service

    configured = settings()
    server = configured.server.model_copy(
        update={
            "host": host or configured.server.host,
            "port": configured.server.port if port is None else port,
            "mcp": configured.server.mcp and not no_mcp,
        }
    )
    configured = configured.model_copy(update={"server": server})
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
    service = Service(kb, configured)
    warning = exposure_warning(server.host, has_keys=bool(server.keys))
    if warning is not None:
        errors.print(f"[yellow]warning:[/] {warning}")
    errors.print(f"ragloop serving on {shown_url(sock)} (Ctrl-C stops)")
    try:
        run_server(create_app(service), sock, header_timeout_s=server.header_timeout_s)
    finally:
        service.close()
        kb.close()

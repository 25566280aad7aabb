"""ragloop mcp: the knowledge base and the loops as MCP tools (stdio or streamable HTTP)."""

from __future__ import annotations

from typing import Literal

import click

from ragloop.cli import config_option
from ragloop.cli.common import errors, kb_option, settings
from ragloop.cli.serve import (
    DEMO_HELP,
    bind,
    run_server,
    served_kb,
    show_access_log,
    shown_url,
    stopped_by_ctrl_c,
)


@click.command(name="mcp")
@config_option
@kb_option
@click.option("--demo", is_flag=True, help=DEMO_HELP)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default=None,
    help="stdio (for a desktop assistant; the default) or http (streamable HTTP at /mcp).",
)
@click.option("--host", default=None, help="HTTP: address to bind (default 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="HTTP: port (8001).")
def mcp_command(
    kb_location: str | None,
    demo: bool,
    transport: Literal["stdio", "http"] | None,
    host: str | None,
    port: int | None,
) -> None:
    """Serve the knowledge base and the loops to MCP clients (stdio or streamable HTTP).

    Tools: search, fetch, retrieve, ask and collections. Resources: each document the
    caller may read, ragloop://documents/COLLECTION/SOURCE, read as its text. Over HTTP,
    requests name an API key of the config ([server.keys.*]); without keys only this machine
    may connect. Needs ragloop[server].
    """
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise click.ClickException(
            'ragloop mcp needs the server extra: pip install "ragloop[server]"'
        ) from None
    from ragloop.server.service import Service

    configured = settings()
    chosen = transport or configured.mcp.transport
    location = kb_location or configured.kb.location
    kb = served_kb(kb_location, demo=demo, location=location, embedder=configured.kb.embedder)
    if chosen == "http":
        server = configured.server.model_copy(
            update={"host": host or configured.mcp.host, "mcp": True}
        )
        configured = configured.model_copy(update={"server": server})
        try:
            sock = bind(server.host, port if port is not None else configured.mcp.port)
        except click.ClickException:
            kb.close()
            raise
    service = Service(kb, configured)
    try:
        if chosen == "stdio":
            import anyio

            from ragloop.server.mcp import build_mcp

            with stopped_by_ctrl_c("ragloop mcp"):
                anyio.run(build_mcp(service).run_stdio_async)
        else:
            from ragloop.server.mcp import mcp_http_app

            errors.print(f"ragloop MCP on {shown_url(sock, '/mcp')} (Ctrl-C stops)")
            show_access_log(server.access_log)
            with stopped_by_ctrl_c("ragloop mcp"):
                run_server(mcp_http_app(service), sock, server)
    finally:
        service.close()
        kb.close()

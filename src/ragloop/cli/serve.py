"""ragloop serve: the HTTP API, its web page and MCP, over the knowledge base of the config."""

from __future__ import annotations

import click

from ragloop.cli import config_option
from ragloop.cli.common import errors, kb_option, open_kb, settings


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


@click.command()
@config_option
@kb_option
@click.option("--host", default=None, help="Address to bind (default: [server] host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Port (default 8000).")
@click.option("--no-mcp", is_flag=True, help="Do not serve MCP at /mcp.")
def serve(kb_location: str | None, host: str | None, port: int | None, no_mcp: bool) -> None:
    """Serve the HTTP API, its web page and MCP (needs ragloop[server]).

    The page is at /, the API under /v1 (OpenAPI docs at /docs), an OpenAI-compatible
    /v1/chat/completions, MCP over streamable HTTP at /mcp. Settings come from ragloop.toml
    ([server], [kb], [engine], [model], [budget]); without API keys only this machine is served.
    """
    need_server_extra()
    import uvicorn

    from ragloop.server.app import create_app
    from ragloop.server.protocol import uvicorn_options
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
    kb = open_kb(location, create=True, embedder=configured.kb.embedder)
    service = Service(kb, configured)
    warning = exposure_warning(server.host, has_keys=bool(server.keys))
    if warning is not None:
        errors.print(f"[yellow]warning:[/] {warning}")
    shown = f"[{server.host}]" if ":" in server.host else server.host
    errors.print(f"ragloop serving on http://{shown}:{server.port}/ (Ctrl-C stops)")
    try:
        uvicorn.run(
            create_app(service),
            host=server.host,
            port=server.port,
            log_level="warning",
            **uvicorn_options(server.header_timeout_s),
        )
    finally:
        service.close()
        kb.close()

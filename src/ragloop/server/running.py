"""A server in a background thread of this process: for notebooks, tests and examples that want
the real HTTP API on loopback without a second process (``ragloop serve`` runs the same app)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from ragloop.config import Settings
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.server.protocol import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    uvicorn_options,
)


class BackgroundServer:
    """uvicorn serving ``app`` on 127.0.0.1 (a free port unless given) in a daemon thread;
    ``url`` is where it listens. A context manager: leaving it stops the server."""

    def __init__(
        self,
        app: Any,
        *,
        port: int = 0,
        header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    ) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", port))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            **uvicorn_options(header_timeout_s, body_timeout_s),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.socket.close()


@contextmanager
def background_server(kb: KnowledgeBase, settings: Settings | None = None) -> Iterator[str]:
    """Serve ``kb`` as ``ragloop serve`` would (the page, the API, MCP at /mcp), on a free
    loopback port; yields the base URL. Without ``settings``, the config file's
    (:func:`ragloop.config.load_settings`)."""
    from ragloop.config import load_settings
    from ragloop.server.app import create_app
    from ragloop.server.service import Service

    service = Service(kb, settings if settings is not None else load_settings())
    server = service.settings.server
    try:
        with BackgroundServer(
            create_app(service),
            header_timeout_s=server.header_timeout_s,
            body_timeout_s=server.body_timeout_s,
        ) as running:
            yield running.url
    finally:
        service.close()

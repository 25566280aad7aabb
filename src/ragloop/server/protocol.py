"""uvicorn's HTTP/1.1 protocol (h11) with a header timeout: a connection that does not finish a
request's headers within ``[server] header_timeout_s`` is closed.

uvicorn (0.55) has no such setting: ``timeout_keep_alive`` starts only after a response, and
is cancelled by the first byte of the next request, so a client that sends its headers a byte
at a time (slowloris), or nothing at all, holds its connection for ever. The timer here runs
whenever the server waits for headers: from the connection's start, and again after each
response; it stops when h11 has parsed a whole request line and headers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEADER_TIMEOUT_S = 10.0


class HeaderTimeoutProtocol(H11Protocol):
    """H11Protocol closing connections whose headers do not arrive in ``header_timeout_s``."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._wait_for_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a request's headers are parsed
            self._headers_arrived()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._wait_for_headers()  # the next request on this kept-alive connection

    def _wait_for_headers(self) -> None:
        self._headers_arrived()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _headers_arrived(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.close()


def header_timeout_protocol(seconds: float) -> type[HeaderTimeoutProtocol]:
    """The protocol class to give uvicorn as ``http=``, with this timeout."""
    return type("HeaderTimeoutProtocol", (HeaderTimeoutProtocol,), {"header_timeout_s": seconds})


def uvicorn_options(header_timeout_s: float) -> dict[str, Any]:
    """What every ragloop server passes to uvicorn: the protocol with the header timeout."""
    return {"http": header_timeout_protocol(header_timeout_s)}

"""uvicorn's HTTP/1.1 protocol (h11) with two timeouts: a connection that does not finish a
request's headers within ``[server] header_timeout_s``, or its body within ``body_timeout_s``
of the headers, is closed.

uvicorn (0.55) has no such settings: ``timeout_keep_alive`` starts only after a response, and
is cancelled by the first byte of the next request, so a client that sends its headers a byte
at a time (slowloris), or nothing at all, holds its connection for ever; and one that declares
a large ``Content-Length`` and sends a byte now and then holds it as long as it likes. The
header timer runs whenever the server waits for headers: from the connection's start, and again
after each response; it stops when h11 has parsed a whole request line and headers. The body
timer runs from then until the body is whole; when it fires the connection is closed (the app
sees the client go away, as when a client disconnects).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 60.0

logger = logging.getLogger("ragloop.server")


class TimeoutProtocol(H11Protocol):
    """H11Protocol closing connections whose headers do not arrive in ``header_timeout_s``,
    or whose body does not arrive in ``body_timeout_s`` after them."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._wait_for_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        self._body_arrived()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        state = self.conn.their_state
        if state is not h11.IDLE:  # a request's headers are parsed
            self._headers_arrived()
        if state is h11.SEND_BODY:
            if getattr(self, "_body_timer", None) is None:
                self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_too_slow)
        else:
            self._body_arrived()

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

    def _body_arrived(self) -> None:
        timer = getattr(self, "_body_timer", None)
        if timer is not None:
            timer.cancel()
            self._body_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.close()

    def _body_too_slow(self) -> None:
        self._body_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.SEND_BODY:
            logger.warning(
                "closed a connection whose request body did not arrive within %g s",
                self.body_timeout_s,
            )
            self.transport.close()


HeaderTimeoutProtocol = TimeoutProtocol  # its name before it timed bodies too


def timeout_protocol(header_timeout_s: float, body_timeout_s: float) -> type[TimeoutProtocol]:
    """The protocol class to give uvicorn as ``http=``, with these timeouts."""
    return type(
        "TimeoutProtocol",
        (TimeoutProtocol,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )


def uvicorn_options(
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
) -> dict[str, Any]:
    """What every ragloop server passes to uvicorn: the protocol with the timeouts."""
    return {"http": timeout_protocol(header_timeout_s, body_timeout_s)}

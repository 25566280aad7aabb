"""A non-streamed run ends when its client goes away: nothing reads its answer, and it holds one
of its key's concurrency slots until it ends (a streamed run is cancelled by its response
instead, when the next write finds the connection closed)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

T = TypeVar("T")

CLIENT_CLOSED = 499  # nginx's "client closed request": never read, but what the log shows


async def _disconnected(request: Request) -> None:
    """Returns when the client closes its connection (the body is read already, so the next
    message the server gives is ``http.disconnect``)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T | Response:
    """``work``'s result, or, when the client disconnects first, ``work`` cancelled (its run
    stops, its trace is stored, its slot is freed) and an empty 499 nobody reads."""
    running = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({running, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
        if not running.done():
            running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    if running.cancelled() or not running.done():
        with contextlib.suppress(asyncio.CancelledError):
            await running
        return Response(status_code=CLIENT_CLOSED)
    return running.result()

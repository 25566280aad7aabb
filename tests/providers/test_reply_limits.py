"""Issue 17, item 11: a misbehaving server on loopback cannot make a call hang, eat memory or
bill twice.

The server here writes raw HTTP over a socket, so it can do what real ones sometimes do: trickle
a body one byte at a time (each read comes before the read timeout, so httpx alone never times
out), send 50 MB, stream events forever, drop the connection mid-body. Each call runs under a
guard thread: a call that outlives the guard is the bug (it used to run for as long as the
server kept going).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from ragloop import (
    AnthropicModel,
    Message,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    OpenAICompatibleModel,
)
from ragloop.providers import RetryPolicy

ASK = [Message(role="user", content="Capital?")]
COMPLETION = json.dumps(
    {"choices": [{"message": {"content": "Paris."}}], "usage": {"prompt_tokens": 3}}
).encode()
GUARD_S = 30.0


class RawServer:
    """Answers every connection with ``behaviour(socket)``; counts connections and bytes."""

    def __init__(self, behaviour: Callable[[socket.socket], None]) -> None:
        self.behaviour = behaviour
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.requests = 0
        self.sent = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> RawServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.listener.close()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            _read_request(conn)
            self.requests += 1
            with contextlib.suppress(OSError):  # the client went away, as a bounded one does
                self.behaviour(conn)

    def send(self, conn: socket.socket, data: bytes) -> None:
        if self.stopped.is_set():
            raise OSError("stopped")
        conn.sendall(data)
        self.sent += len(data)


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)


def _headers(status: int = 200, length: int | None = None, kind: str = "application/json") -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"content-type: {kind}", "connection: close"]
    if length is not None:
        lines.append(f"content-length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _guarded(call: Callable[[], Any]) -> BaseException | Any:
    """Run ``call`` in a thread; its result or exception. Fails the test if it outlives the
    guard (the call would have hung)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD_S)
    assert not thread.is_alive(), f"the call was still running after {GUARD_S} s"
    return outcome[0]


def _openai(url: str, **options: Any) -> OpenAICompatibleModel:
    options.setdefault("retry", RetryPolicy(max_attempts=1))
    return OpenAICompatibleModel("gpt-4o-mini", base_url=url, api_key="sk-test", **options)


# -- time ----------------------------------------------------------------------------------------


def trickle(server: RawServer) -> Callable[[socket.socket], None]:
    def behaviour(conn: socket.socket) -> None:
        server.send(conn, _headers(length=len(COMPLETION) + 10_000))
        for byte in (COMPLETION + b" " * 10_000)[:]:
            server.send(conn, bytes([byte]))
            time.sleep(0.05)  # well within the read timeout: each read succeeds

    return behaviour


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_trickled_body_times_out_as_a_whole(mode):
    server = RawServer(lambda conn: None)
    server.behaviour = trickle(server)
    with server:
        model = _openai(server.url, timeout=1.0)
        if mode == "sync":
            outcome = _guarded(lambda: model.complete(ASK))
        else:
            outcome = _guarded(lambda: asyncio.run(model.acomplete(ASK)))
    assert isinstance(outcome, ModelTimeout), outcome
    assert server.sent < len(COMPLETION) + 10_000  # it gave up long before the body ended


def endless_events(server: RawServer, event: bytes) -> Callable[[socket.socket], None]:
    def behaviour(conn: socket.socket) -> None:
        server.send(conn, _headers(kind="text/event-stream"))
        while True:
            server.send(conn, event)
            time.sleep(0.01)

    return behaviour


OPENAI_DELTA = b'data: {"choices": [{"delta": {"content": "la "}}]}\n\n'
ANTHROPIC_DELTA = (
    b"event: content_block_delta\n"
    b'data: {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "la "}}\n\n'
)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_never_ending_stream_ends_at_the_stream_timeout(provider, mode):
    server = RawServer(lambda conn: None)
    delta = OPENAI_DELTA if provider == "openai" else ANTHROPIC_DELTA
    server.behaviour = endless_events(server, delta)
    with server:
        if provider == "openai":
            model: Any = _openai(server.url, stream_timeout=1.0)
        else:
            model = AnthropicModel(
                "claude-x",
                base_url=server.url,
                api_key="k",
                stream_timeout=1.0,
                retry=RetryPolicy(max_attempts=1),
            )
        pieces: list[str] = []

        def read_sync() -> None:
            pieces.extend(model.stream(ASK))

        async def read_async() -> None:
            async for piece in model.astream(ASK):
                pieces.append(piece)

        outcome = _guarded(read_sync if mode == "sync" else lambda: asyncio.run(read_async()))
    assert isinstance(outcome, ModelTimeout), outcome
    assert pieces  # the stream was read until the deadline


# -- size ----------------------------------------------------------------------------------------

FIFTY_MB = 50 * 1024 * 1024


def huge(server: RawServer, status: int) -> Callable[[socket.socket], None]:
    def behaviour(conn: socket.socket) -> None:
        server.send(conn, _headers(status, length=FIFTY_MB))
        server.send(conn, b'{"error": "')
        block = b"x" * 65536
        for _ in range(FIFTY_MB // len(block)):
            server.send(conn, block)

    return behaviour


def test_a_50_mb_reply_is_refused_without_reading_it_all():
    server = RawServer(lambda conn: None)
    server.behaviour = huge(server, 200)
    with server:
        outcome = _guarded(lambda: _openai(server.url).complete(ASK))
        time.sleep(0.2)
    assert isinstance(outcome, ModelError), outcome
    assert "over" in str(outcome)
    assert server.sent < FIFTY_MB  # it stopped reading at the 32 MiB cap


def test_retried_50_mb_error_bodies_are_read_only_in_part():
    server = RawServer(lambda conn: None)
    server.behaviour = huge(server, 500)
    retry = RetryPolicy(max_attempts=4, initial_backoff_s=0, max_backoff_s=0, jitter_s=0)
    with server:
        outcome = _guarded(lambda: _openai(server.url, retry=retry).complete(ASK))
        time.sleep(0.2)
    assert isinstance(outcome, ModelHTTPError), outcome
    assert outcome.status == 500
    assert server.requests == 4
    assert server.sent < FIFTY_MB  # four whole bodies would be 200 MB


# -- malformed stream usage ------------------------------------------------------------------------


@pytest.mark.parametrize("usage", [{"prompt_tokens": -5}, {"completion_tokens": "many"}])
def test_malformed_stream_usage_is_a_model_error(usage):
    def behaviour(conn: socket.socket) -> None:
        conn.sendall(_headers(kind="text/event-stream"))
        conn.sendall(OPENAI_DELTA)
        conn.sendall(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        conn.sendall(b"data: [DONE]\n\n")

    with RawServer(behaviour) as server:
        outcome = _guarded(lambda: list(_openai(server.url).stream(ASK)))
    assert type(outcome) is ModelError, outcome
    assert "usage" in str(outcome)


# -- a connection dropped mid-body -----------------------------------------------------------------


def dropped(server: RawServer) -> Callable[[socket.socket], None]:
    def behaviour(conn: socket.socket) -> None:
        server.send(conn, _headers(length=len(COMPLETION)))
        server.send(conn, COMPLETION[:10])  # then the connection closes

    return behaviour


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_reply_dropped_mid_body_is_not_retried_by_default(mode):
    server = RawServer(lambda conn: None)
    server.behaviour = dropped(server)
    retry = RetryPolicy(max_attempts=3, initial_backoff_s=0, max_backoff_s=0, jitter_s=0)
    with server:
        model = _openai(server.url, retry=retry)
        call = model.complete if mode == "sync" else lambda m: asyncio.run(model.acomplete(m))
        outcome = _guarded(lambda: call(ASK))
    assert isinstance(outcome, ModelError), outcome
    assert "retry_dropped_replies" in str(outcome)
    assert server.requests == 1  # billed once at most


def test_retrying_dropped_replies_is_opt_in():
    server = RawServer(lambda conn: None)
    server.behaviour = dropped(server)
    retry = RetryPolicy(
        max_attempts=3, initial_backoff_s=0, max_backoff_s=0, jitter_s=0, retry_dropped_replies=True
    )
    with server:
        outcome = _guarded(lambda: _openai(server.url, retry=retry).complete(ASK))
    assert isinstance(outcome, ModelError), outcome
    assert server.requests == 3

"""A small HTTP server on 127.0.0.1 that answers with scripted replies and records requests.

It speaks plain HTTP/1.1 (keep-alive for JSON replies, ``Connection: close`` after a stream), so
the providers run their real clients, retries and SSE parsing against it.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: JSON, a raw body, or server-sent events (``(event, data)`` pairs).

    ``hold`` answers nothing until the server stops, so the client times out first.
    """

    status: int = 200
    json: Any = None
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str | None, str]] | None = None
    hold: bool = False


@dataclass
class Received:
    """One request as the server saw it; header names are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        owner = self.server.owner
        path = self.path.split("?")[0]
        owner.gets.append(path)
        self._send_body(owner.pages.get(path) or Reply(404, json={"error": "not found"}))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        owner = self.server.owner
        owner.received.append(
            Received(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=json.loads(raw) if raw else None,
            )
        )
        try:
            reply = owner.replies.popleft()
        except IndexError:
            reply = Reply(500, json={"error": {"message": "the test server has no reply queued"}})
        if reply.hold:
            owner.released.wait(10)
            self.close_connection = True
            return
        if reply.events is not None:
            self._send_events(reply)
        else:
            self._send_body(reply)

    def _send_body(self, reply: Reply) -> None:
        text = reply.body if reply.body is not None else json.dumps(reply.json)
        payload = text.encode()
        self.send_response(reply.status)
        headers = {"content-type": "application/json", **reply.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send_events(self, reply: Reply) -> None:
        self.send_response(reply.status)
        headers = {"content-type": "text/event-stream", **reply.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("connection", "close")
        self.end_headers()
        for event, data in reply.events or []:
            lines = f"event: {event}\n" if event else ""
            self.wfile.write(f"{lines}data: {data}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackServer


class LoopbackServer:
    """Start with ``start()``; queue answers to POSTs with ``reply()``; answer GETs of a path
    with ``pages[path]`` (404 when absent); read ``received`` (the POSTs) and ``gets``."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.pages: dict[str, Reply] = {}
        self.gets: list[str] = []
        self.received: list[Received] = []
        self.released = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def reply(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def start(self) -> LoopbackServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.released.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


class _ChatHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ChatServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        owner = self.server.owner
        owner.requests += 1
        if owner.delay_s and owner.released.wait(owner.delay_s):
            self.close_connection = True
            return
        body = json.loads(raw) if raw else {}
        if body.get("stream"):
            self._stream(owner)
            return
        if owner.body is not None:
            self._send(owner.body.encode())
            return
        reply = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": owner.content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        self._send(json.dumps(reply).encode())

    def _stream(self, owner: ChatServer) -> None:
        """The streamed content in deltas of ``piece_chars`` (one delta when 0), stopping
        halfway until ``resume`` is set when ``pause_halfway``."""
        text = owner.streamed if owner.streamed is not None else owner.content
        size = owner.piece_chars or max(len(text), 1)
        pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        for n, piece in enumerate(pieces):
            if owner.pause_halfway and n == len(pieces) // 2:
                self.wfile.flush()
                owner.halfway.set()
                owner.resume.wait(60)
            delta = {**chunk, "choices": [{"index": 0, "delta": {"content": piece}}]}
            self.wfile.write(f"data: {json.dumps(delta)}\n\n".encode())
            self.wfile.flush()
        end = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        self.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
        self.close_connection = True

    def _send(self, payload: bytes) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _ChatServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: ChatServer


class ChatServer:
    """An OpenAI-compatible chat model on 127.0.0.1 that answers every request with
    ``content`` (streamed when the request asks), after ``delay_s`` seconds; ``body``, when
    given, is the whole reply to a request that is not streamed; ``streamed`` what a streamed
    request gets instead, in deltas of ``piece_chars``, stopping halfway until :attr:`resume`
    is set when ``pause_halfway``; a context manager. ``spec`` is the model spec ragloop reads
    (``openai-compatible:URL#m``)."""

    def __init__(
        self,
        content: str = "",
        *,
        body: str | None = None,
        delay_s: float = 0.0,
        streamed: str | None = None,
        piece_chars: int = 0,
        pause_halfway: bool = False,
    ) -> None:
        self.content = content
        self.body = body
        self.delay_s = delay_s
        self.streamed = streamed  # what a streamed request gets (else ``content``)
        self.piece_chars = piece_chars
        self.pause_halfway = pause_halfway
        self.halfway = threading.Event()  # set when a paused stream is halfway
        self.resume = threading.Event()  # ... which goes on when this is set
        self.requests = 0
        self.released = threading.Event()
        self._httpd = _ChatServer(("127.0.0.1", 0), _ChatHandler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def spec(self) -> str:
        return f"openai-compatible:http://127.0.0.1:{self._httpd.server_address[1]}/v1#m"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.resume.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

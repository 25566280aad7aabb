"""Slowloris: a connection that never finishes its request's headers is closed after
``[server] header_timeout_s``; one that sends them is served, kept alive, and its next request
gets the same timeout. Raw sockets against uvicorn on 127.0.0.1, with a short timeout."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from ragloop.config import ServerSettings, Settings
from ragloop.server.app import create_app
from ragloop.server.running import BackgroundServer
from ragloop.server.service import Service
from tests.server.conftest import build_kb

WAIT_S = 20.0  # how long a test waits for the server to close: far above the timeout


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, int]]:
    folder = tmp_path_factory.mktemp("slowloris")
    from ragloop import KnowledgeBase

    kb = KnowledgeBase(build_kb(folder / "kb.sqlite"), create=False)
    settings = Settings(server=ServerSettings(traces=str(folder / "t.sqlite")))
    service = Service(kb, settings)
    try:
        with BackgroundServer(create_app(service), header_timeout_s=0.5) as running:
            host, port = running.socket.getsockname()[:2]
            yield host, port
    finally:
        service.close()
        kb.close()


def connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=WAIT_S)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes the connection (reads what it sends until the end)."""
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_partial_headers_are_cut_off(served):
    socks = [connect(served) for _ in range(20)]
    for sock in socks:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    assert all(closed_by_server(sock) for sock in socks)
    for sock in socks:
        sock.close()


def test_a_silent_connection_is_cut_off(served):
    with connect(served) as sock:
        assert closed_by_server(sock)


def test_whole_headers_are_served_and_the_next_request_is_timed_too(served):
    with connect(served) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: unfinished
        assert closed_by_server(sock)


def test_the_setting_is_read_from_the_config():
    assert Settings().server.header_timeout_s == 10.0
    custom = Settings.model_validate({"server": {"header_timeout_s": 2.5}})
    assert custom.server.header_timeout_s == 2.5
    with pytest.raises(ValueError, match="header_timeout_s"):
        Settings.model_validate({"server": {"header_timeout_s": 0}})

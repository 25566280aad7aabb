"""What a connection may cost a real `ragloop serve` (issue 58, items 6, 8 and 13): a body sent
slowly is cut off at ``body_timeout_s``; a request with no valid key is refused (401) before
its body is read, with no ``100 Continue``; one with a key gets ``100 Continue`` before it
sends its body; and a keyless server refuses to start with ``cors_origins = ["*"]``. Raw
sockets against the process on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from ragloop.config import hash_key
from tests.server.conftest import KEYS
from tests.server.test_header_timeout import closed_by_server
from tests.server.test_serve_command import serve_process

WAIT_S = 20.0  # how long a test waits for the server: far above the timeouts
BODY = b'{"query": "' + b"tent " * 400 + b'"}'  # 2 kB: curl asks for 100 Continue


@pytest.fixture(scope="module")
def served(kb_file, tmp_path_factory) -> Iterator[tuple[str, int]]:
    folder = tmp_path_factory.mktemp("limits")
    config = folder / "ragloop.toml"
    config.write_text(
        f'[server]\ntraces = "{folder / "traces.sqlite"}"\nbody_timeout_s = 1\n\n'
        f'[server.keys.root]\nhash = "{hash_key(KEYS["root"])}"\nadmin = true\n',
        encoding="utf-8",
    )
    with serve_process("--kb", str(kb_file), config=config) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def head(path: str, length: int, *, key: str | None, expect: bool = False) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {length}",
    ]
    lines += [f"Authorization: Bearer {key}"] if key else []
    lines += ["Expect: 100-continue"] if expect else []
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_body_sent_slowly_is_cut_off(served):
    socks = []
    for _ in range(20):
        sock = socket.create_connection(served, timeout=WAIT_S)
        sock.sendall(head("/v1/search", 9_000_000, key=KEYS["root"]) + b'{"query": ')
        socks.append(sock)
    for sock in socks:
        sock.sendall(b"t")  # a byte now and then keeps a connection busy, not alive
    assert all(closed_by_server(sock) for sock in socks)
    for sock in socks:
        sock.close()


def test_a_request_without_a_key_is_refused_before_its_body(served):
    for key in (None, "rl-wrong-key"):
        with socket.create_connection(served, timeout=WAIT_S) as sock:
            sock.sendall(head("/v1/search", 9_000_000, key=key, expect=True))
            answer = sock.recv(65536)  # no body was sent
            assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
            assert b"100 Continue" not in answer


def test_a_request_with_a_key_is_told_to_continue_before_it_sends_its_body(served):
    with socket.create_connection(served, timeout=WAIT_S) as sock:
        sock.sendall(head("/v1/search", len(BODY), key=KEYS["root"], expect=True))
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(BODY)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def environment_without_ragloop() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAGLOOP_")}


def test_a_keyless_server_refuses_every_origin(kb_file, tmp_path):
    config = tmp_path / "ragloop.toml"
    config.write_text('[server]\ncors_origins = ["*"]\n', encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, "-m", "ragloop", "serve", "--kb", str(kb_file), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environment_without_ragloop(), "RAGLOOP_CONFIG": str(config)},
    )
    assert ran.returncode == 1
    assert "cors_origins" in ran.stderr
    assert "add a key" in ran.stderr
    config.write_text(
        f'[server]\ncors_origins = ["*"]\ntraces = "{tmp_path / "t.sqlite"}"\n\n'
        f'[server.keys.root]\nhash = "{hash_key(KEYS["root"])}"\n',
        encoding="utf-8",
    )
    with serve_process("--kb", str(kb_file), config=config) as (url, _):
        assert httpx.get(f"{url}/healthz").status_code == 200

"""Running the server as an operator does (issue 60, items 4, 5 and 7): one access-log line per
request naming the key (never the key itself), switched off in ragloop.toml; Ctrl-C stops
`ragloop serve` with exit status 0 and one short line; a favicon; errors that name the field
the caller sent; a delete of nothing is a 404."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from ragloop.config import Settings, hash_key
from tests.server.conftest import KEYS, auth, serving
from tests.server.test_serve_command import free_port, wait_until_up


def serve_until_ctrl_c(kb_file: Path, config: Path, requests) -> tuple[int, str]:
    """`ragloop serve` in a process of its own: ``requests(url)`` made, then Ctrl-C (SIGINT);
    its exit status and what it wrote on stderr."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAGLOOP_")}
    environment["RAGLOOP_CONFIG"] = str(config)
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ragloop", "serve", "--kb", str(kb_file), "--port", str(port)],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
        try:
            requests(wait_until_up(f"http://127.0.0.1:{port}", process, log))
            process.send_signal(signal.SIGINT)
            code = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        log.seek(0)
        return code, log.read()


def keyed_config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "ragloop.toml"
    config.write_text(
        f'[server]\ntraces = "{tmp_path / "traces.sqlite"}"\n{extra}\n'
        f'[server.keys.alice]\nhash = "{hash_key(KEYS["alice"])}"\ncollections = ["public"]\n',
        encoding="utf-8",
    )
    return config


def some_requests(url: str) -> None:
    assert httpx.get(f"{url}/healthz").status_code == 200
    found = httpx.post(f"{url}/v1/search", json={"query": "tent"}, headers=auth("alice"))
    assert found.status_code == 200, found.text
    wrong = httpx.post(f"{url}/v1/search", json={"query": "tent"}, headers=auth("bob"))
    assert wrong.status_code == 401  # bob's key is not configured here


def test_serve_logs_a_line_per_request_and_ctrl_c_stops_it_with_exit_0(kb_file, tmp_path):
    code, stderr = serve_until_ctrl_c(kb_file, keyed_config(tmp_path), some_requests)
    assert code == 0, stderr
    assert "Aborted" not in stderr
    assert stderr.strip().splitlines()[-1] == "ragloop serve stopped"
    lines = stderr.splitlines()
    health = next(line for line in lines if "GET /healthz" in line)
    assert health.split("GET /healthz ")[1].startswith("200 ")
    search = [line for line in lines if "POST /v1/search" in line]
    assert len(search) == 2
    assert search[0].split("POST /v1/search ")[1].split()[0] == "200"
    assert search[0].split()[-3:-1][1] == "ms"  # "... 200 12 ms key=alice"
    assert search[0].endswith("key=alice")
    assert " 401 " in search[1]
    assert search[1].endswith("key=unknown")
    assert KEYS["alice"] not in stderr  # the key's name, never the key
    assert KEYS["bob"] not in stderr


def test_the_access_log_is_switched_off_in_ragloop_toml(kb_file, tmp_path):
    config = keyed_config(tmp_path, "access_log = false")
    code, stderr = serve_until_ctrl_c(kb_file, config, some_requests)
    assert code == 0, stderr
    assert "/v1/search" not in stderr
    assert "/healthz" not in stderr


@pytest.fixture
def local(kb_file, tmp_path):
    with serving(kb_file, Settings(), tmp_path) as (url, service):
        yield url, service


def test_the_page_has_a_favicon(local):
    url, _ = local
    icon = httpx.get(f"{url}/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.startswith("<svg")
    assert 'rel="icon"' in httpx.get(f"{url}/").text


def test_errors_name_the_field_the_caller_sent(local):
    url, _ = local
    empty = httpx.post(f"{url}/v1/search", json={"query": " "})
    assert empty.status_code == 422
    assert empty.json()["detail"].startswith("query: ")
    assert "question" not in empty.json()["detail"]
    long = httpx.post(f"{url}/v1/search", json={"query": "x" * 4001})
    assert long.status_code == 413
    assert long.json()["detail"].startswith("query: longer than 4000 characters")
    ask = httpx.post(f"{url}/v1/ask", json={"question": ""})
    assert ask.status_code == 422
    assert ask.json()["detail"].startswith("question: ")
    retrieve = httpx.post(f"{url}/v1/retrieve", json={"question": "\n"})
    assert retrieve.json()["detail"].startswith("question: ")
    chat = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "ragloop", "messages": [{"role": "user", "content": " "}]},
    )
    assert chat.status_code == 422
    assert chat.json()["error"]["message"].startswith("messages (the last user message): ")


def test_deleting_a_document_that_is_not_there_is_a_404(local):
    url, service = local
    gone = httpx.delete(f"{url}/v1/documents", params={"source": "nope.html"})
    assert gone.status_code == 404
    assert gone.json()["detail"] == (
        "source: no document 'nope.html' in the collections this key may change"
    )
    named = httpx.delete(
        f"{url}/v1/documents", params={"source": "nope.html", "collection": "public"}
    )
    assert named.status_code == 404
    assert "collection 'public'" in named.json()["detail"]
    assert service.kb.document_version("public", "hire.md")  # nothing else was touched

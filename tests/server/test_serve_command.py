"""`ragloop serve` as a user runs it (a process of its own), on SQLite and, scaled out, as two
processes over one PostgreSQL knowledge base."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx

from ragloop.cli.serve import exposure_warning
from ragloop.config import hash_key
from tests.server.conftest import KEYS, PUBLIC, SECRET, auth


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def ragloop_serve(*args: str, config: Path | None = None) -> Iterator[str]:
    with serve_process(*args, config=config) as (url, _):
        yield url


@contextmanager
def serve_process(
    *args: str, config: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`ragloop serve ARGS` on a free port, with no RAGLOOP_* variable of this machine but
    ``env``'s; its URL once it answers, and the process."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAGLOOP_")}
    environment.update(env or {})
    if config is not None:
        environment["RAGLOOP_CONFIG"] = str(config)
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ragloop", "serve", "--port", str(port), *args],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
        try:
            yield wait_until_up(f"http://127.0.0.1:{port}", process, log), process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_until_up(url: str, process: subprocess.Popen[str], log: IO[str]) -> str:
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            log.seek(0)
            raise AssertionError(f"ragloop serve ended: {log.read()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("ragloop serve did not start")
        time.sleep(0.2)


def test_serve_answers_on_loopback_with_its_page_and_api(kb_file, tmp_path):
    config = tmp_path / "ragloop.toml"
    config.write_text(f'[server]\ntraces = "{tmp_path / "traces.sqlite"}"\n', encoding="utf-8")
    with ragloop_serve("--kb", str(kb_file), config=config) as url:
        assert "<title>ragloop</title>" in httpx.get(url).text
        answer = httpx.post(
            f"{url}/v1/ask", json={"question": "How much does the Skylark 2 weigh?"}, timeout=120
        ).json()
        assert "2.1 kg" in answer["answer"]
        trace = httpx.get(f"{url}{answer['trace_url']}").json()
        assert trace["meta"]["key"] == "local"
        assert httpx.get(f"{url}/docs").status_code == 200
        assert answer["target_precision"] == 0.8  # the offline engines' default
        assert (answer["gaps"] is None) is answer["confident"]  # not sure: what was found


def test_serve_takes_a_target_precision_and_a_request_may_ask_for_its_own(kb_file, tmp_path):
    config = tmp_path / "ragloop.toml"
    config.write_text(f'[server]\ntraces = "{tmp_path / "traces.sqlite"}"\n', encoding="utf-8")
    question = "How much does the Skylark 2 weigh?"
    with ragloop_serve("--kb", str(kb_file), "--target-precision", "0.99", config=config) as url:
        strict = httpx.post(f"{url}/v1/ask", json={"question": question}, timeout=120).json()
        assert strict["target_precision"] == 0.99
        assert strict["confident"] is False
        assert strict["gaps"]["parts"][0]["source"] == "skylark.md"
        eased = httpx.post(
            f"{url}/v1/ask", json={"question": question, "target_precision": 0.5}, timeout=120
        ).json()
        assert eased["target_precision"] == 0.5
        assert eased["confident"] is True


def test_a_server_bound_beyond_loopback_without_keys_warns():
    assert exposure_warning("127.0.0.1", has_keys=False) is None
    assert exposure_warning("::1", has_keys=False) is None
    assert exposure_warning("0.0.0.0", has_keys=True) is None
    warning = exposure_warning("0.0.0.0", has_keys=False)
    assert warning is not None
    assert "no API keys" in warning


def test_two_servers_over_one_postgresql_share_documents_and_traces(postgres_database, tmp_path):
    from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase

    with PostgresKnowledgeBase(postgres_database, embedder="hash") as kb:
        kb.add_documents(PUBLIC, collection="public")
        kb.add_documents(SECRET, collection="secret")
    config = tmp_path / "ragloop.toml"
    config.write_text(
        f"""
[kb]
location = "{postgres_database}"

[server]
traces = "{tmp_path / "traces.sqlite"}"

[server.keys.alice]
hash = "{hash_key(KEYS["alice"])}"
collections = ["public"]

[server.keys.root]
hash = "{hash_key(KEYS["root"])}"
admin = true
""",
        encoding="utf-8",
    )
    with ragloop_serve(config=config) as first, ragloop_serve(config=config) as second:
        assert httpx.get(f"{first}/healthz").json()["knowledge_base"] == "postgresql"
        doc = {"source": "stoves.md", "text": "The Ember stove boils a litre in four minutes."}
        added = httpx.post(
            f"{first}/v1/documents",
            json={"documents": [doc], "collection": "public"},
            headers=auth("root"),
            timeout=60,
        )
        assert added.json()["added"] == 1, added.text
        found = httpx.post(
            f"{second}/v1/search", json={"query": "Ember stove litre"}, headers=auth("alice")
        ).json()["chunks"]
        assert found[0]["source"] == "stoves.md"  # written by one process, read by the other

        async def ask_both() -> list[dict]:
            async with httpx.AsyncClient(headers=auth("alice"), timeout=120) as client:
                replies = await asyncio.gather(
                    *(
                        client.post(f"{url}/v1/ask", json={"question": q})
                        for url in (first, second)
                        for q in ("How much does the Skylark 2 weigh?", "How long do refunds take?")
                    )
                )
            assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
            return [r.json() for r in replies]

        answers = asyncio.run(ask_both())
        assert "2.1 kg" in answers[0]["answer"]
        for answer in answers:
            assert {c["collection"] for c in answer["chunks"]} <= {"public"}
        # a run answered by one process is read through the other: one trace store
        made_by_second = answers[2]["trace_url"]
        assert httpx.get(f"{first}{made_by_second}", headers=auth("alice")).status_code == 200


def test_serve_watch_keeps_the_served_collection_in_step_with_a_folder(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kettle.md").write_text("# Kettle\n\nThe kettle boils water in ninety seconds.\n")
    kb = tmp_path / "kb.sqlite"
    subprocess.run(
        [sys.executable, "-m", "ragloop", "ingest", str(docs), "--kb", str(kb), "-q"],
        check=True,
        capture_output=True,
    )
    config = tmp_path / "ragloop.toml"
    config.write_text(f'[server]\ntraces = "{tmp_path / "traces.sqlite"}"\n', encoding="utf-8")

    def found(query: str) -> list[str]:
        body = {"query": query, "mode": "bm25"}
        chunks = httpx.post(f"{url}/v1/search", json=body, timeout=30).json()["chunks"]
        return [c["source"] for c in chunks]

    with ragloop_serve("--kb", str(kb), "--watch", str(docs), config=config) as url:
        # an upload named as the watched file's document is skipped, not put in its place
        upload = {"files": ("kettle.md", b"# Kettle\n\nUploaded: it boils in a minute.\n")}
        uploaded = httpx.post(f"{url}/v1/documents/files", files=upload, timeout=60).json()
        assert (uploaded["added"], uploaded["updated"]) == (0, 0)
        assert "the document of the file" in uploaded["skipped"][0][1]
        assert found("kettle boils") == ["kettle.md"]
        (docs / "toaster.md").write_text("# Toaster\n\nThe toaster has six browning levels.\n")
        deadline = time.monotonic() + 30
        while "toaster.md" not in found("toaster browning"):
            assert time.monotonic() < deadline, "the served knowledge base never saw the file"
            time.sleep(0.1)
        (docs / "kettle.md").unlink()
        while "kettle.md" in found("kettle boils"):
            assert time.monotonic() < deadline, "the deleted file's document stayed"
            time.sleep(0.1)

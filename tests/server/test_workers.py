"""`ragloop serve --workers N`: N processes on one port over one SQLite knowledge base (WAL),
each run's trace readable whichever worker answers, a document one worker adds found by all;
a busy port is still one clear error."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.server.conftest import build_kb
from tests.server.test_serve_command import serve_process


def workers_of(pid: int) -> list[int]:
    """The worker processes uvicorn's supervisor ``pid`` started (multiprocessing spawns)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if int(fields[1]) == pid and b"spawn_main" in command:
            found.append(int(stat.parent.name))
    return found


def test_two_workers_serve_one_sqlite_knowledge_base(tmp_path):
    kb = build_kb(tmp_path / "kb.sqlite")
    config = tmp_path / "ragloop.toml"
    config.write_text("[server]\nworkers = 2\n", encoding="utf-8")  # or --workers 2
    with serve_process("--kb", str(kb), config=config) as (url, process):
        health = httpx.get(f"{url}/healthz").json()
        assert health["workers"] == 2
        assert health["shared"] == {  # what a worker counts is its own: /healthz says so
            "traces": "file",
            "concurrency": "process",
            "query_vectors": "process",
        }
        for _ in range(600):  # the second worker may still be starting
            if len(workers_of(process.pid)) == 2:
                break
            time.sleep(0.05)
        assert len(workers_of(process.pid)) == 2
        added = httpx.post(
            f"{url}/v1/documents",
            json={"documents": [{"source": "stove.md", "text": "The Ember stove boils water."}]},
            timeout=60,
        )
        assert added.json()["added"] == 1, added.text
        for n in range(6):  # new connections: the kernel hands them to either worker
            with httpx.Client(base_url=url, timeout=120) as client:
                found = client.post("/v1/search", json={"query": "Ember stove"}).json()
                assert found["chunks"][0]["source"] == "stove.md", n
                answer = client.post("/v1/ask", json={"question": "What does the Skylark 2 weigh?"})
            with httpx.Client(base_url=url, timeout=60) as other:
                trace = other.get(answer.json()["trace_url"])
            assert trace.status_code == 200, trace.text  # one trace file, every worker
    assert workers_of(process.pid) == []  # stopping the command stopped its workers


def test_a_busy_port_is_a_clear_error_with_workers_too(tmp_path):
    kb = build_kb(tmp_path / "kb.sqlite")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "ragloop", "serve", "--kb", str(kb)]
        done = subprocess.run(
            [*command, "--port", str(port), "--workers", "2"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert f"port {port} is in use" in done.stderr
    assert "serving on" not in done.stderr

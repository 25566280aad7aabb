"""`ragloop serve` and `ragloop mcp` as a user runs them: `--demo` serves the bundled demo
knowledge base, a missing `--kb` is refused (never created empty), and a busy port is a clear
error with a non-zero exit before "serving on ..." is printed."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from ragloop.cli import main
from tests.server.test_serve_command import ragloop_serve

pytest.importorskip("mcp", reason="the MCP tests need ragloop[server]")

from mcp import Client, StdioServerParameters


def run(*args: str, config: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"RAGLOOP_CONFIG": str(config)})
    return result.exit_code, result.output


@pytest.fixture
def config(tmp_path) -> Path:
    file = tmp_path / "ragloop.toml"
    file.write_text(f'[server]\ntraces = "{tmp_path / "t.sqlite"}"\n', encoding="utf-8")
    return file


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_a_missing_kb_is_refused_and_not_created(command, config, tmp_path):
    typo = tmp_path / "kb-typo.sqlite"
    code, output = run(command, "--kb", str(typo), config=config)
    assert code != 0
    assert "no knowledge base at" in output
    assert "--demo" in output
    assert "serving on" not in output
    assert not typo.exists()


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_kb_and_demo_together_are_a_usage_error(command, config, kb_file):
    code, output = run(command, "--demo", "--kb", str(kb_file), config=config)
    assert code == 2
    assert "give one" in output


@pytest.mark.parametrize("command", [("serve",), ("mcp", "--transport", "http")])
def test_a_busy_port_fails_before_serving_on(command, config, kb_file):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        code, output = run(*command, "--kb", str(kb_file), "--port", port, config=config)
    assert code == 1
    assert f"port {port} is in use" in output
    assert "serving on" not in output
    assert "MCP on" not in output
    assert "Traceback" not in output


def test_serve_demo_answers_from_the_demo(config):
    with ragloop_serve("--demo", config=config) as url:
        found = httpx.post(
            f"{url}/v1/search", json={"query": "How much does the Skylark 2 weigh?"}, timeout=60
        ).json()["chunks"]
        assert any("1.6 kg" in c["text"] for c in found)


async def test_mcp_demo_over_stdio(config):
    env = {**os.environ, "RAGLOOP_CONFIG": str(config)}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "ragloop", "mcp", "--demo"], env=env
    )
    async with Client(params, read_timeout_seconds=120) as client:
        found = await client.call_tool("search", {"query": "How much does the Skylark 2 weigh?"})
        assert not found.is_error, found.content
        assert any("1.6 kg" in r["text"] for r in found.structured_content["results"])

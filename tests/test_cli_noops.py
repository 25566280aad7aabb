"""No silent no-ops (issue 60, items 5 and 7): an ingest that finds nothing to read fails and
makes no knowledge base; a command given a knowledge base that is not there fails; the CLI
refuses the questions the server refuses, in the same words; retrieval-loop lists its chunks
best first; `ragloop mcp --help` names every tool it serves."""

from __future__ import annotations

import asyncio
import re

import pytest

from ragloop.config import Settings
from ragloop.testing.conformance import write_corpus
from tests.test_cli_kb import ragloop


def test_an_ingest_of_a_folder_with_nothing_to_read_fails_and_makes_no_kb(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "photo.png").write_bytes(b"\x89PNG")
    kb = tmp_path / "kb.sqlite"
    result = ragloop("ingest", str(empty), "--kb", str(kb), "--embedder", "hash")
    assert result.returncode == 1
    assert "no file to read in" in result.stderr
    assert "photo.png: unsupported file type '.png'" in result.stderr
    assert not kb.exists()
    assert list(tmp_path.iterdir()) == [empty]  # nothing made beside it either


def test_an_ingest_whose_every_file_is_unreadable_fails(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_bytes(b"\x00\x01 binary")
    result = ragloop("ingest", str(docs), "--kb", str(tmp_path / "kb.sqlite"), "--json")
    assert result.returncode == 1
    assert "no file could be read in" in result.stderr
    assert '"skipped"' in result.stdout  # the report says why, as it always did


def test_traces_of_a_knowledge_base_that_is_not_there_fail(tmp_path):
    missing = tmp_path / "typo.sqlite"
    for command in (("traces", "list"), ("traces", "show", "abc"), ("traces", "list", "--stale")):
        result = ragloop(*command, "--kb", str(missing))
        assert result.returncode == 1, command
        assert f"no knowledge base at {missing}" in result.stderr
        assert "no traces yet" not in result.stdout
    assert not missing.exists()


def test_the_cli_refuses_the_question_the_server_refuses_in_the_same_words(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    kb = tmp_path / "kb.sqlite"
    assert ragloop("ingest", str(docs), "--kb", str(kb), "--embedder", "hash").returncode == 0
    question = "why " * 1001  # 4,004 characters: one over the server's default
    result = ragloop("ask", question, "--kb", str(kb))
    assert result.returncode == 2
    refused = Settings().server.question_refusal(question)
    assert refused is not None
    assert refused[0] == 413
    assert result.stderr.strip() == f"Error: {refused[1]}"
    config = tmp_path / "ragloop.toml"
    config.write_text("[server]\nmax_question_chars = 10\n", encoding="utf-8")
    shorter = ragloop(
        "ask", "how heavy is a tent?", "--kb", str(kb), env={"RAGLOOP_CONFIG": str(config)}
    )
    assert shorter.returncode == 2
    assert "longer than 10 characters" in shorter.stderr


def test_retrieval_loop_lists_its_chunks_best_first(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    kb = tmp_path / "kb.sqlite"
    assert ragloop("ingest", str(docs), "--kb", str(kb), "--embedder", "hash").returncode == 0
    result = ragloop(
        "retrieval-loop", "how heavy is a tent?", "--kb", str(kb), "--max-iter", "3",
        "--sub-query", "tent weight", "--sub-query", "refund policy", "--min-new-chunks", "0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    listed = result.stdout.split("top chunks:")[1]
    scores = [float(s) for s in re.findall(r"^\s+\d+\. (\d\.\d{3}) ", listed, re.M)]
    assert len(scores) >= 3
    assert scores == sorted(scores, reverse=True)


def test_mcp_help_names_every_tool_it_serves(tmp_path):
    pytest.importorskip("mcp", reason="the MCP server needs ragloop[server]")
    from ragloop import KnowledgeBase
    from ragloop.server.mcp import build_mcp
    from ragloop.server.service import Service

    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    service = Service(
        kb, Settings.model_validate({"server": {"traces": str(tmp_path / "t.sqlite")}})
    )
    try:
        served = {tool.name for tool in asyncio.run(build_mcp(service).list_tools())}
    finally:
        service.close()
        kb.close()
    shown = " ".join(ragloop("mcp", "--help").stdout.split())
    named = re.search(r"Tools: ([^.]+)\.", shown)
    assert named is not None, shown
    assert set(re.split(r", | and ", named.group(1))) == served
    assert "Resources:" in shown

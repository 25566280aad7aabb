"""Bad input is refused before any work, in one line, with no traceback (issue 18, item 8); a
question or query may come from standard input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "evaluation" / "fixtures"


def ragloop(*args, env=None, stdin=None, prelude=""):
    code = f"{prelude}import sys; from ragloop.cli import main; sys.argv[0] = 'ragloop'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        input=stdin,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
        timeout=300,
    )


def refused(result, message: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"Error: {message}"  # one line, no usage, no traceback
    assert result.stdout == ""


@pytest.fixture
def empty_demo(tmp_path):
    """A demo cache that stays empty unless a command builds the demo knowledge base."""
    folder = tmp_path / "demo"
    folder.mkdir()
    return folder, {"RAGLOOP_DEMO_DIR": str(folder)}


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_a_blank_question_or_query_is_refused_before_the_knowledge_base_opens(text, empty_demo):
    folder, env = empty_demo
    refused(ragloop("ask", "--demo", text, env=env), "the question is empty")
    refused(ragloop("search", "--demo", text, env=env), "the query is empty")
    refused(ragloop("retrieval-loop", "--demo", text, env=env), "the query is empty")
    refused(ragloop("ask", "-", "--demo", stdin=text, env=env), "the question is empty")
    assert list(folder.iterdir()) == []  # the demo knowledge base was never built


def test_a_question_can_come_from_standard_input(tmp_path):
    # longer than the server's limit, which ragloop ask keeps too: a config that allows it
    env = {"RAGLOOP_DEMO_DIR": str(tmp_path), "RAGLOOP_SERVER__MAX_QUESTION_CHARS": "200000"}
    question = "How much does the Skylark 2 weigh? " + "Please answer briefly. " * 8000
    assert len(question.encode()) > 128 * 1024  # more than one argument may hold on Linux
    result = ragloop("ask", "-", "--demo", "--json", stdin=question, env=env)
    assert result.returncode == 0, result.stderr
    assert '"query": "How much does the Skylark 2 weigh?' in result.stdout
    result = ragloop("search", "-", "--demo", "--json", stdin="Skylark 2 weight\n", env=env)
    assert result.returncode == 0, result.stderr
    assert "skylark-2.md" in result.stdout


def test_an_output_file_in_a_missing_folder_is_refused_before_the_run(tmp_path, empty_demo):
    folder, env = empty_demo
    missing = tmp_path / "no-such-folder"
    refused(
        ragloop("ask", "--demo", "Tents?", "--trace-out", str(missing / "t.json"), env=env),
        f"--trace-out: the folder '{missing}' does not exist",
    )
    refused(
        ragloop("traces", "export", "abc", "--demo", "--html", str(missing / "t.html"), env=env),
        f"--html: the folder '{missing}' does not exist",
    )
    refused(
        ragloop("ask", "--demo", "Tents?", "--trace-out", str(tmp_path), env=env),
        f"--trace-out: '{tmp_path}' is a folder",
    )
    assert list(folder.iterdir()) == []
    kb = tmp_path / "eval.sqlite"
    dataset = str(FIXTURES / "hotpot_official.json")
    for option in ("--json", "--chart"):
        refused(
            ragloop("eval", dataset, "--kb", str(kb), option, str(missing / "out")),
            f"{option}: the folder '{missing}' does not exist",
        )
    assert not kb.exists()  # nothing was indexed


def test_chart_without_matplotlib_is_refused_before_the_evaluation(tmp_path):
    kb = tmp_path / "eval.sqlite"
    dataset = str(FIXTURES / "hotpot_official.json")
    result = ragloop(
        "eval",
        dataset,
        "--kb",
        str(kb),
        "--chart",
        str(tmp_path / "chart.png"),
        prelude="import sys; sys.modules['matplotlib'] = None; ",
    )
    refused(result, "--chart needs matplotlib: pip install 'ragloop[eval]' (or leave --chart out)")
    assert not kb.exists()


def test_an_unknown_embedder_leaves_no_knowledge_base_behind(tmp_path):
    kb = tmp_path / "kb.sqlite"
    docs = tmp_path / "notes.md"
    docs.write_text("# Notes\n\nTents are pitched with six pegs.\n")
    refused(
        ragloop("ingest", str(docs), "--kb", str(kb), "--embedder", "bert"),
        "--embedder: unknown embedder 'bert'; choose from default, minilm, e5, hash, hash-DIM, "
        "none",
    )
    assert list(tmp_path.iterdir()) == [docs]

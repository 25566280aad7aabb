"""Continuing a conversation from the CLI (issue 60, item 2): `ragloop ask -c` reads a
follow-up with the questions and answers before it (as the OpenAI route does), `--conversation
ID` continues a given one, and `ragloop traces list` shows which turn of which conversation
each run was."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ragloop import KnowledgeBase
from ragloop.cli import main
from ragloop.observability.traces import TraceStore
from ragloop.testing.conformance import write_corpus

FIRST = "How much does the Ridgeline 2 tent weigh?"
FOLLOW_UP = "how many hikers does it sleep?"


@pytest.fixture
def kb(tmp_path) -> Path:
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=None) as base:
        base.ingest(write_corpus(tmp_path / "docs"))
    return path


def ragloop(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": "250"})
    return result.exit_code, " ".join(result.output.split())


def runs(kb: Path) -> list:
    store = TraceStore(kb.with_suffix(".traces.sqlite"))
    try:
        return sorted(store.list(100), key=lambda r: r.started_at)
    finally:
        store.close()


def test_ask_c_reads_a_follow_up_with_the_conversation_before_it(kb):
    code, out = ragloop("ask", FIRST, "--kb", str(kb))
    assert code == 0, out
    assert "follow up: ragloop ask -c QUESTION" in out
    code, out = ragloop("ask", "-c", FOLLOW_UP, "--kb", str(kb))
    assert code == 0, out
    assert "read with the conversation: How many hikers does the Ridgeline 2 sleep?" in out
    first, second = runs(kb)
    assert second.question == "How many hikers does the Ridgeline 2 sleep?"  # what ran
    assert second.meta["followup"] == FOLLOW_UP  # what was asked
    assert second.meta["conversation"] == first.meta["conversation"]
    assert (first.meta["turn"], second.meta["turn"]) == (1, 2)


def test_a_new_question_starts_a_conversation_and_conversation_id_picks_one(kb):
    assert ragloop("ask", FIRST, "--kb", str(kb))[0] == 0
    assert ragloop("ask", "When are refunds issued?", "--kb", str(kb))[0] == 0
    tent, refunds = runs(kb)
    assert tent.meta["conversation"] != refunds.meta["conversation"]
    wanted = tent.meta["conversation"][:6]
    code, out = ragloop("ask", "--conversation", wanted, FOLLOW_UP, "--kb", str(kb))
    assert code == 0, out
    assert "the Ridgeline 2" in out.split("read with the conversation:")[1]
    code, listed = ragloop("traces", "list", "--kb", str(kb))
    assert code == 0, listed
    assert f"{tent.meta['conversation']} #2 {FOLLOW_UP}" in listed  # its own words
    assert f"{tent.meta['conversation']} #1 {FIRST}" in listed
    assert f"{refunds.meta['conversation']} #1 When are refunds issued?" in listed
    code, out = ragloop("ask", "--conversation", "zzz", FOLLOW_UP, "--kb", str(kb))
    assert code == 1
    assert "no conversation starts with 'zzz'" in out


def test_continuing_with_nothing_to_continue_fails(kb):
    code, out = ragloop("ask", "-c", FOLLOW_UP, "--kb", str(kb))
    assert code == 1
    assert "no conversation to continue" in out
    assert runs(kb) == []
    code, out = ragloop("ask", "-c", "--demo")
    assert code == 2
    assert "continue a conversation with a QUESTION" in out

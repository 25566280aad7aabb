"""Stored data never drives the terminal (issue 31, item 4): escapes in file names, text,
questions and answers (ESC[2J, an OSC window title, BEL, C1 controls) are shown as visible
escapes by every command that prints them, in tables, panels, traces and JSON."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from ragloop import Document, KnowledgeBase
from ragloop.cli import main as cli
from ragloop.cli.tables import cell, printable

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;pwned\x07"
C1 = "\x9b31m\x9d0;t\x9c"  # CSI and OSC as single C1 characters
EVIL_SOURCE = f"tents{CLEAR}{TITLE}.md"
EVIL_TEXT = f"Ridgeline tents{CLEAR} sleep four {TITLE} people{C1} and [bold]weigh[/] 3 kg.\r"
QUESTION = f"How many people{CLEAR} does a Ridgeline tent sleep{TITLE}?"
# what a terminal would obey: C0 controls but newline and tab, DEL, C1
OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture
def kb_path(tmp_path):
    path = tmp_path / "kb.sqlite"
    kb = KnowledgeBase(path, embedder=None)
    kb.add_documents(
        [Document(text=EVIL_TEXT, source=EVIL_SOURCE, title=f"Ridgeline{TITLE}{C1}")],
        collection=f"gear{CLEAR}",
    )
    kb.close()
    return path


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def assert_inert(output: str) -> None:
    assert not OBEYED.findall(output), repr(output)


def test_search_ask_and_traces_show_escapes_as_text(kb_path):
    kb = str(kb_path)
    searched = run("search", "Ridgeline tents", "--kb", kb)
    assert_inert(searched)
    assert "\\x1b[2J" in searched  # shown, not obeyed
    assert "[bold]weigh[/]" in searched  # markup in the text printed as it is
    assert_inert(run("search", "Ridgeline tents", "--kb", kb, "--json"))
    asked = run("ask", QUESTION, "--kb", kb)
    assert_inert(asked)
    assert "\\x1b]0;pwned\\x07" in asked
    assert_inert(run("ask", QUESTION, "--kb", kb, "--json"))
    assert_inert(run("ask", QUESTION, "--kb", kb, "--engine", "agent"))
    listed = run("traces", "list", "--kb", kb)
    assert_inert(listed)
    trace_id = json.loads(run("traces", "list", "--kb", kb, "--json"))[0]["id"]
    shown = run("traces", "show", trace_id, "--kb", kb)
    assert_inert(shown)
    assert "tents" in shown
    assert_inert(run("traces", "show", trace_id, "--kb", kb, "--json"))
    assert_inert(run("kb", "stats", "--kb", kb))
    assert_inert(run("retrieval-loop", QUESTION, "--kb", kb))


def test_json_output_stays_the_same_json(kb_path):
    out = run("search", "Ridgeline tents", "--kb", str(kb_path), "--json")
    chunk = json.loads(out)[0]
    assert chunk["source"] == EVIL_SOURCE
    assert TITLE in chunk["content"]
    assert C1 in chunk["content"]


def test_a_file_name_with_escapes_is_shown_inert_when_ingested(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / f"notes{CLEAR}{TITLE}.md").write_text("Ridgeline tents sleep four.\n")
    (folder / f"empty{CLEAR}.md").write_text("")  # skipped: its name is listed
    out = run("ingest", str(folder), "--kb", str(tmp_path / "kb.sqlite"))
    assert_inert(out)


def test_an_error_message_quoting_a_name_is_inert(tmp_path):
    result = CliRunner().invoke(cli, ["search", "x", "--kb", str(tmp_path / f"kb{TITLE}.sqlite")])
    assert result.exit_code == 1
    assert "no knowledge base" in result.output
    assert_inert(result.output)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("t\x1b]0;x\x07", "t\\x1b]0;x\\x07"),
        ("\x9b1m\x7f", "\\x9b1m\\x7f"),
        ("keep\ttabs\nand lines", "keep\ttabs\nand lines"),
        ("\u202eevil", "\\u202eevil"),
        ("é ü 中文", "é ü 中文"),
    ],
)
def test_printable(text, shown):
    assert printable(text) == shown


def test_cell_escapes_markup_and_controls():
    assert cell("[red]x\x1b[0m") == "\\[red]x\\x1b[0m"

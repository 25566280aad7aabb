"""Output is readable where it is read (issue 18, item 9): piped, a listing is plain
tab-separated text; at 80 columns in a terminal, file names fold and numbers stay whole, never
cut with an ellipsis; long questions are shortened only in listings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "evaluation" / "fixtures"
LONG_NAME = "a-rather-long-folder-name/nested-once-more/the-binary-file-that-gets-skipped.txt"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ragloop(*args, terminal=False, env=None, stdin=None, cwd=None):
    screen = {"TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"} if terminal else {}
    clean = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    result = subprocess.run(
        [sys.executable, "-m", "ragloop", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=cwd,
        env={**clean, **screen, **(env or {})},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return ANSI.sub("", result.stdout)


def column(text: str, index: int) -> str:
    """The text of one column of a boxed table, its folded lines joined."""
    cells = [line.split("│")[index + 1] for line in text.splitlines() if line.startswith("│")]
    return "".join(c.strip() for c in cells)


@pytest.fixture
def corpus(tmp_path):
    binary = tmp_path / "docs" / LONG_NAME
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x00\x01binary")
    (tmp_path / "docs" / "tents.md").write_text(
        "# Tents\n\nThe Ridgeline 2 tent weighs 1.4 kg and sleeps two hikers.\n"
    )
    return tmp_path


def test_piped_listings_are_plain_tab_separated_lines(corpus):
    out = ragloop("ingest", "docs", "--kb", "kb.sqlite", "--embedder", "hash", cwd=corpus)
    assert (
        "added\tupdated\tunchanged\tremoved\tskipped\tchunks added\tembedded\n1\t0\t0\t0\t1\t1\t1\n"
        in out
    )
    assert f"file\treason\ndocs/{LONG_NAME}\tbinary file (contains NUL bytes)\n" in out
    found = ragloop("search", "tent weight", "--kb", "kb.sqlite", cwd=corpus).splitlines()
    assert found[0] == "#\tscore\tsource\ttext"
    rank, score, source, text = found[1].split("\t")
    assert (rank, source) == ("1", "tents.md Tents")  # relative to the folder ingested
    assert re.fullmatch(r"\d\.\d{3}", score)
    assert text == "The Ridgeline 2 tent weighs 1.4 kg and sleeps two hikers."


def test_at_80_columns_names_fold_and_numbers_stay_whole(corpus):
    out = ragloop(
        "ingest", "docs", "--kb", "kb.sqlite", "--embedder", "hash", terminal=True, cwd=corpus
    )
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    skipped = out.split("skipped", 2)[-1]
    assert column(skipped, 0) == f"docs/{LONG_NAME}"  # folded over lines, never cut
    report = ragloop(
        "eval",
        str(FIXTURES / "hotpot_official.json"),
        "--kb",
        "eval.sqlite",
        "--embedder",
        "hash",
        "--engine",
        "bm25",
        "--engine",
        "retrieval",
        terminal=True,
        cwd=corpus,
    )
    assert "…" not in report  # eleven number columns do not fit: one block per configuration
    assert max(len(line) for line in report.splitlines()) <= 80
    assert re.search(r"R@2 \d\.\d{3} +R@5 \d\.\d{3}", report)


def test_a_long_question_is_shortened_in_listings_only(tmp_path):
    # a question longer than the server takes: allowed here, as a config may allow it
    env = {"RAGLOOP_DEMO_DIR": str(tmp_path), "RAGLOOP_SERVER__MAX_QUESTION_CHARS": "200000"}
    question = "How much does the Skylark 2 weigh? " + "Say which page says so. " * 5000
    out = ragloop("ask", "-", "--demo", stdin=question, env=env)
    # it printed thousands of lines before; each hop now lists the chunks its searches found
    assert len(out.splitlines()) < 200
    assert f"({len(question.strip()):,} characters)" in out
    listed = ragloop("traces", "list", "--demo", env=env).splitlines()
    assert len(listed) == 4  # the title, the header, one trace, how to continue it
    assert listed[2].split("\t")[4].endswith(f"({len(question.strip()):,} characters)")
    stored = ragloop("traces", "list", "--demo", "--json", env=env)
    assert question.strip() in stored.replace("\\n", "\n")  # the trace holds it whole

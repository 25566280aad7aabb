"""A knowledge base on a full disk (issue 58, item 4): the answer comes back although the
offline generator's word-vector cache and the run's trace cannot be written; each failure is
one warning line, never a traceback. On a small tmpfs the test mounts itself (root only;
skipped with the reason where mounting is not allowed)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import auth, build_kb, key_settings, serving

SLACK = 36 * 1024  # left free: SQLite's shared-memory file, so the file opens and reads
QUESTIONS = [
    "What does the Skylark 2 weigh?",
    "How much does tent hire cost for a weekend?",
    "When are refunds issued?",
    "Is the Skylark 2 a two-person tent?",
    "How long does a return take to reach the warehouse?",
]


@pytest.fixture
def full_disk(tmp_path) -> Iterator[Path]:
    """A 3 MB tmpfs holding the test's knowledge base, then filled but for :data:`SLACK`."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"this machine does not let the tests mount a tmpfs: {mounted.stderr.strip()}")
    try:
        build_kb(where / "kb.sqlite")
        free = os.statvfs(where).f_bavail * os.statvfs(where).f_frsize
        with open(where / "filler", "wb") as filler:
            os.posix_fallocate(filler.fileno(), 0, free - SLACK)
        yield where / "kb.sqlite"
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_ask_answers_on_a_full_disk_with_one_line_a_failure(full_disk):
    for question in QUESTIONS[:2]:
        ran = subprocess.run(
            [sys.executable, "-m", "ragloop", "ask", "--kb", str(full_disk), question],
            capture_output=True,
            text=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if not k.startswith("RAGLOOP_")},
        )
        assert ran.returncode == 0, ran.stderr
        assert "Traceback" not in ran.stderr
        lines = ran.stderr.strip().splitlines()
        assert lines
        assert all(line.startswith("warning: ") for line in lines), ran.stderr
        assert any("disk is full" in line for line in lines)
        assert "ragloop traces show" not in ran.stdout  # its trace was not saved


def test_the_server_answers_on_a_full_disk(full_disk, tmp_path):
    with serving(full_disk, key_settings(), full_disk.parent) as (url, _):
        for question in QUESTIONS:
            answered = httpx.post(
                f"{url}/v1/ask", json={"question": question}, headers=auth("alice"), timeout=120
            )
            assert answered.status_code == 200, answered.text
            assert answered.json()["answer"]

"""No rule is fitted to a known question: no run of six words of a dev question (the Python
docs' dev set in ../shared/data when it is there, and benchmarks/howto_dev.jsonl) appears in
src/, comments and docstrings included (the rule of ../shared/tools/dev_quotes.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEV_SETS = [
    ROOT.parent / "shared" / "data" / "pydocs311_qa" / "dev.jsonl",
    ROOT / "benchmarks" / "howto_dev.jsonl",
]
RUN = 6  # words in a row


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


@pytest.fixture(scope="module")
def source_words() -> str:
    files = sorted((ROOT / "src").rglob("*.py"))
    return " " + " ".join(" ".join(words(p.read_text(errors="ignore"))) for p in files) + " "


@pytest.mark.parametrize("dev_set", DEV_SETS, ids=lambda p: p.name)
def test_no_dev_question_is_quoted_in_the_source(dev_set, source_words):
    if not dev_set.exists():
        pytest.skip(f"{dev_set} is not on this machine")
    quoted = []
    for line in dev_set.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        asked = words(item["question"])
        runs = {" ".join(asked[i : i + RUN]) for i in range(len(asked) - RUN + 1)}
        hit = next((run for run in sorted(runs) if f" {run} " in source_words), None)
        if hit is not None:
            quoted.append(f"{item['id']}: '{hit}'")
    assert not quoted, f"src/ quotes dev questions: {quoted}"

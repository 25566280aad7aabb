"""Benchmark data from ../shared/data (read in place, never copied into the repo)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
HOTPOT = DATA / "hotpotqa_ircot500" / "hotpotqa_dev500_ircot.jsonl"


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold: frozenset[str]  # titles of the gold passages
    answers: tuple[str, ...]


def hotpot_pool() -> tuple[list[Question], dict[str, str]]:
    """The 500 HotpotQA questions and their pooled passages (title -> text, unique by title)."""
    questions: list[Question] = []
    passages: dict[str, str] = {}
    with HOTPOT.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            for context in row["contexts"]:
                passages.setdefault(context["title"], context["paragraph_text"])
            gold = frozenset(c["title"] for c in row["contexts"] if c["is_supporting"])
            answers = tuple(s for a in row["answers_objects"] for s in a.get("spans", []))
            questions.append(Question(row["question_id"], row["question_text"], gold, answers))
    return questions, passages


def recall(ranked_titles: list[str], gold: frozenset[str], k: int) -> tuple[float, float]:
    """(all gold passages in the top k: 1 or 0, share of gold passages in the top k)."""
    top = set(ranked_titles[:k])
    found = len(gold & top)
    return float(found == len(gold)), found / len(gold)

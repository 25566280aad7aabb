"""Questions the documents cannot answer, built rather than written: HotpotQA and MuSiQue
questions asked with their gold passages withheld from the knowledge base.

The standard construction (as benchmarks/calibrate_offline.py does for one search, by leaving
the gold passages out of its results): every gold passage of the chosen questions is deleted
from a copy of the dataset's cached knowledge base, so no search of any engine can reach them,
and the question is asked as it is. The distractors of HotpotQA (passages about the same names)
and MuSiQue's pooled corpus stay, so the knowledge base still holds text close to the question:
what makes a wrong answer tempting.

Beside each withheld question an answerable one of the same dataset is asked over the same
copy (its gold passages kept: no answerable question shares a gold passage with a withheld
one), so that the risk-coverage figures mix the two in equal numbers.

The questions come from outside calibrate_offline.py's fitting sample: HotpotQA's in
bench_eval.py's sample (every ``SAMPLE_EVERY``-th), yes/no questions left out (no sentence says
"yes"), taken alternately as withheld and answerable; MuSiQue's whole questions (calibrate_offline
fits on their single-hop sub-questions, never on the questions as asked), alternately too.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from bench_eval import SAMPLE_EVERY
from bench_retrieval import CACHE, DATASETS, knowledge_base

from ragloop.evaluation.datasets import EvalDataset, EvalQuestion, load_dataset
from ragloop.kb.knowledge_base import KnowledgeBase

NAMES = ("HotpotQA", "MuSiQue")


@dataclass
class WithheldSet:
    """A dataset's withheld questions and as many answerable ones, over the knowledge base
    without the withheld questions' gold passages."""

    name: str
    kb: KnowledgeBase
    withheld: list[EvalQuestion]
    answerable: list[EvalQuestion]
    passages: int  # in the knowledge base before the gold passages were withheld


def candidates(name: str, dataset: EvalDataset) -> list[EvalQuestion]:
    """The questions outside calibrate_offline.py's fit, in dataset order."""
    if name == "HotpotQA":
        return [
            q
            for i, q in enumerate(dataset.questions)
            if i % SAMPLE_EVERY == 0 and not {a.lower() for a in q.answers} & {"yes", "no"}
        ]
    return [q for q in dataset.questions if q.answers and q.gold]


def split(
    questions: list[EvalQuestion], size: int
) -> tuple[list[EvalQuestion], list[EvalQuestion]]:
    """``size`` questions to withhold (every other one, from the first) and ``size`` answerable
    ones (from the rest, none sharing a gold passage with a withheld one)."""
    withheld = questions[0::2][:size]
    hidden = {g for q in withheld for g in q.gold}
    answerable = [q for q in questions[1::2] if not hidden & set(q.gold)][:size]
    return withheld, answerable


def withheld_copy(path: Path, hidden: set[str]) -> Path:
    """A copy of the knowledge base at ``path`` without the passages ``hidden`` (made once
    per set of passages, in benchmarks/.cache; an interrupted build leaves no file behind)."""
    label = path.stem
    digest = hashlib.sha256("\0".join(sorted(hidden)).encode()).hexdigest()[:12]
    target = CACHE / f"{label}-withheld-{digest}.sqlite"
    if target.exists():
        return target
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    source, copy = sqlite3.connect(path), sqlite3.connect(partial)
    with copy:
        source.backup(copy)
    source.close()
    copy.close()
    without = KnowledgeBase(partial)
    removed = sum(without.delete(pid) for pid in sorted(hidden))
    without.close()
    if removed < len(hidden):
        partial.unlink()
        raise RuntimeError(f"{label}: {len(hidden) - removed} gold passages were not found")
    partial.rename(target)
    return target


def withheld_set(name: str, size: int) -> WithheldSet:
    """``size`` withheld and ``size`` answerable questions of ``name`` (HotpotQA or MuSiQue)
    over its knowledge base without the withheld questions' gold passages."""
    dataset = load_dataset(DATASETS[name])
    withheld, answerable = split(candidates(name, dataset), size)
    base = knowledge_base(name, dataset, "minilm")  # built (and cached) as bench_eval's
    path = base.path
    base.close()
    assert path is not None
    hidden = {g for q in withheld for g in q.gold}
    kb = KnowledgeBase(withheld_copy(path, hidden))
    return WithheldSet(name, kb, withheld, answerable, len(dataset.passages))

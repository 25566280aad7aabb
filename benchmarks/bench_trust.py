"""Answers a user can trust, on any corpus (issue 59): how often the offline loops' answers
are right, how often they are sure and right, sure and wrong, and how often they refuse what
the documents do not answer, on four question sets, with their defaults (a target precision
of 0.8 read through the shipped calibration, components/heuristics/confidence.py).

1. The Python 3.11 docs' dev questions (``../shared/data/pydocs311_qa/dev.jsonl``);
2. how-to questions asked as a new user asks them (``benchmarks/howto_dev.jsonl``, written
   before any answer to them was seen);
3. the demo shop (``benchmarks/demo_dev.jsonl``, the same);
4. HotpotQA and MuSiQue questions with their gold passages withheld from the knowledge base,
   beside as many answerable ones (benchmarks/withheld.py).

Right: what the answer shows holds a gold answer (every part of a two-part question), over the
answerable questions; an answer that is not sure shows the closest passages, which count.
Confident and right: over the answerable questions. Confident but wrong: over all questions (a
sure answer to a question the documents do not answer is wrong). Precision: the share right
of the sure answers. Refusal: the unanswerable questions answered not sure. Targets (issue
59): right >= 75%, confident and right >= 50% (paraphrases >= 40%), confident but wrong <= 5%,
precision >= 80% on every corpus, refusal >= 90%, p50 <= 1.5 s on the Python docs.

    python benchmarks/run.py bench_trust     # PYDOCS_KB=FILE: a pydocs knowledge base built already
"""

from __future__ import annotations

import os
from pathlib import Path

from bench_answers import (
    DEMO_QA,
    HOWTO_QA,
    TRUST_COLUMNS,
    demo_knowledge_base,
    engines,
    measure,
    pydocs_items,
    pydocs_knowledge_base,
    table,
    withheld_runs,
)

ENGINES = ("RAGLoop.offline", "AgentLoop.offline")
WITHHELD = 30  # of each multi-hop dataset, and as many answerable


def question_set(kb, items):  # type: ignore[no-untyped-def]
    chosen = [e for e in engines(kb) if e.name in ENGINES]
    for engine in chosen:
        measure(kb, engine, items)
    return table(chosen, TRUST_COLUMNS)


def run() -> str:
    load = os.getloadavg()[0]
    built = os.environ.get("PYDOCS_KB")
    docs = pydocs_knowledge_base(Path(built) if built else None)
    pydocs = question_set(docs, pydocs_items())
    howto = question_set(docs, pydocs_items(HOWTO_QA))
    docs.close()
    shop = demo_knowledge_base()
    demo = question_set(shop, pydocs_items(DEMO_QA))
    shop.close()
    withheld, notes = withheld_runs(WITHHELD, [e.lower() for e in ENGINES])
    multihop = table(withheld, TRUST_COLUMNS)
    return "\n".join(
        [
            "## Answers a user can trust: right, sure and right, sure and wrong, on any corpus",
            "",
            __doc__.split("\n\n")[2].replace("\n", " "),
            "",
            "### The Python docs' dev questions",
            "",
            *pydocs,
            "",
            "### How-to questions asked as a new user asks them (`benchmarks/howto_dev.jsonl`)",
            "",
            *howto,
            "",
            "### The demo shop (`benchmarks/demo_dev.jsonl`)",
            "",
            *demo,
            "",
            "### HotpotQA and MuSiQue, gold passages withheld, beside answerable questions",
            "",
            *multihop,
            "",
            "; ".join(notes) + ".",
            "",
            f"1-minute load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
            "(2 cores): latency moves with it.",
        ]
    )


if __name__ == "__main__":
    print(run())

"""Check benchmarks/demo_dev.jsonl against ragloop's demo corpus.

Run:  .venv/bin/python benchmarks/check_demo_dev.py [--corpus DIR] [--dataset PATH]

The corpus is the 34 markdown files under src/ragloop/demo/corpus/ (care/, policies/,
products/, staff/), read as raw text with whitespace collapsed to single spaces.

Checks, for every item:
  * schema: id demo-NNN in order and unique, question non-empty and not repeated, kind in
    {fact, paraphrase, multi, unanswerable}, answerable matches kind, gold files are corpus
    files;
  * each evidence fragment occurs verbatim (case-sensitive, whitespace collapsed) in one of
    the item's gold_files, and every gold file contributes at least one fragment;
  * each gold answer (for multi: every alternative of every gold_answers_all group, at least
    two groups) occurs, case-insensitively, in the item's evidence and is at most 4 words;
  * no gold answer occurs, case-insensitively, in the question;
  * unanswerable items: empty gold_answers/gold_files/evidence, lexical_trap is a bool, a
    note is given, and each of absent_terms occurs in no corpus document (case-insensitive);
  * no question repeats one of the demo questions shipped with ragloop (exact, case-folded).

Exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from dev_set_checks import check_items, collapse

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE.parent / "src" / "ragloop" / "demo" / "corpus"
KINDS = {"fact", "paraphrase", "multi", "unanswerable"}
# The questions `ragloop ask --demo` ships with (ragloop.demo.DEMO_QUESTIONS); used only if
# the package cannot be imported.
SHIPPED_DEMO_QUESTIONS = (
    "How much does the Skylark 2 weigh?",
    "Do you rent out stoves?",
    "How long do I have to return an item, and how long does standard delivery take?",
    "What warranty does the tent Priya Shah takes wild camping come with?",
)


def load_corpus(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): collapse(p.read_text(encoding="utf-8"))
        for p in sorted(root.rglob("*.md"))
    }


def shipped_questions() -> set[str]:
    texts = list(SHIPPED_DEMO_QUESTIONS)
    try:
        from ragloop.demo import DEMO_QUESTIONS

        texts += [q.text for q in DEMO_QUESTIONS]
    except Exception:
        pass
    return {t.casefold().strip() for t in texts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--dataset", type=Path, default=HERE / "demo_dev.jsonl")
    args = ap.parse_args()

    docs = load_corpus(args.corpus)
    items = [
        json.loads(line)
        for line in args.dataset.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    demo_qs = shipped_questions()

    failures = check_items(
        items,
        prefix="demo",
        kinds=KINDS,
        multi_kind="multi",
        docs=docs,
        known=demo_qs,
        known_name="a shipped demo question",
    )

    counts = collections.Counter(i.get("kind") for i in items)
    gold_docs = sorted({f for i in items for f in i.get("gold_files", [])})
    traps = sum(1 for i in items if i.get("kind") == "unanswerable" and i.get("lexical_trap"))
    n_ev = sum(len(i.get("evidence", [])) for i in items)
    print(f"corpus documents: {len(docs)}")
    print(f"items: {len(items)}  " + "  ".join(f"{k}={counts[k]}" for k in sorted(counts)))
    print(f"unanswerable with lexical_trap: {traps}")
    print(f"evidence fragments: {n_ev}")
    print(f"documents with a gold answer: {len(gold_docs)} of {len(docs)}")
    missing = sorted(set(docs) - set(gold_docs))
    if missing:
        print(f"documents without a question: {', '.join(missing)}")
    if failures:
        print(f"FAIL: {len(failures)} problem(s)")
        for f in failures:
            print("  " + f)
        return 1
    print("OK: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

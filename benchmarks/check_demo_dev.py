"""Check benchmarks/demo_dev.jsonl against ragloop's demo corpus.

Run:  /work/main/.venv/bin/python benchmarks/check_demo_dev.py [--corpus DIR] [--dataset PATH]

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
import re
import sys
from pathlib import Path

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


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


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
    lower_docs = {k: v.lower() for k, v in docs.items()}
    items = [
        json.loads(line)
        for line in args.dataset.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    demo_qs = shipped_questions()

    failures: list[str] = []

    def fail(item_id: str, msg: str) -> None:
        failures.append(f"{item_id}: {msg}")

    seen_ids: set[str] = set()
    seen_questions: set[str] = set()
    for n, item in enumerate(items, 1):
        iid = item.get("id", f"<line {n}>")
        if iid in seen_ids:
            fail(iid, "duplicate id")
        seen_ids.add(iid)
        if iid != f"demo-{n:03d}":
            fail(iid, f"expected id demo-{n:03d}")
        q = item.get("question", "")
        if not q.strip():
            fail(iid, "empty question")
        if q.casefold().strip() in seen_questions:
            fail(iid, "duplicate question")
        seen_questions.add(q.casefold().strip())
        if q.casefold().strip() in demo_qs:
            fail(iid, "question repeats a shipped demo question")
        kind = item.get("kind")
        if kind not in KINDS:
            fail(iid, f"bad kind {kind!r}")
            continue
        if item.get("answerable") is not (kind != "unanswerable"):
            fail(iid, "answerable does not match kind")

        if kind == "unanswerable":
            for key in ("gold_answers", "gold_answers_all", "gold_files", "evidence"):
                if item.get(key):
                    fail(iid, f"unanswerable item has non-empty {key}")
            if not isinstance(item.get("lexical_trap"), bool):
                fail(iid, "lexical_trap must be true/false")
            if not item.get("note"):
                fail(iid, "missing note")
            terms = item.get("absent_terms") or []
            if not terms:
                fail(iid, "missing absent_terms")
            for term in terms:
                hits = [p for p, t in lower_docs.items() if term.lower() in t]
                if hits:
                    fail(iid, f"absent term {term!r} occurs in {', '.join(hits)}")
            continue

        files = item.get("gold_files") or []
        evidence = item.get("evidence") or []
        if not files:
            fail(iid, "no gold_files")
        if not evidence:
            fail(iid, "no evidence")
        for f in files:
            if f not in docs:
                fail(iid, f"gold file {f} is not a corpus document")
        for frag in evidence:
            cf = collapse(frag)
            if not any(cf in docs.get(f, "") for f in files):
                fail(iid, f"evidence not found in gold files: {frag[:80]!r}")
        for f in files:
            if f in docs and not any(collapse(frag) in docs[f] for frag in evidence):
                fail(iid, f"no evidence fragment comes from {f}")

        if kind == "multi":
            groups = item.get("gold_answers_all") or []
            if len(groups) < 2:
                fail(iid, "multi needs at least two gold_answers_all groups")
            if item.get("gold_answers"):
                fail(iid, "multi item should have empty gold_answers")
        else:
            groups = [item.get("gold_answers") or []]
            if item.get("gold_answers_all"):
                fail(iid, f"{kind} item should not have gold_answers_all")
        ev_text = " ".join(collapse(e) for e in evidence).lower()
        for group in groups:
            if not group:
                fail(iid, "empty gold answer group")
            for ans in group:
                if ans.lower() not in ev_text:
                    fail(iid, f"gold answer {ans!r} not in evidence")
                if ans.lower() in q.lower():
                    fail(iid, f"gold answer {ans!r} occurs in the question")
                if len(ans.split()) > 4:
                    fail(iid, f"gold answer {ans!r} longer than 4 words")

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

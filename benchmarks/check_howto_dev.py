"""Check benchmarks/howto_dev.jsonl against the Python 3.11 docs corpus.

Run:  /work/main/.venv/bin/python benchmarks/check_howto_dev.py [--tarball PATH] [--dataset PATH]

Reads the corpus straight from the tarball (nothing is unpacked). Page text is
BeautifulSoup get_text() (no separator) of div[role=main], with the '¶'
header-link character removed and whitespace collapsed to single spaces, the
same extraction that pydocs311_qa/README.md describes for dev.jsonl.

Checks, for every item:
  * schema: id howto-NNN in order, kind in {howto, howto_multi, unanswerable},
    answerable matches kind, gold files are corpus pages;
  * each evidence fragment occurs verbatim in one of its gold_files (after
    collapsing whitespace);
  * each gold answer (every alternative of every gold_answers_all group for
    howto_multi) occurs, case-insensitively, in the item's evidence, and is at
    most 4 words long;
  * no gold answer occurs, case-insensitively, in the question;
  * unanswerable items: lexical_trap is a bool, note is given, and each of
    absent_terms occurs nowhere (case-insensitive) in the text of any of the
    374 corpus pages;
  * no question repeats one of pydocs311_qa/dev.jsonl (exact, case-folded).

Exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tarfile
from pathlib import Path

from bs4 import BeautifulSoup

HERE = Path(__file__).resolve().parent
DEFAULT_TARBALL = Path("/work/shared/data/pydocs311/pydocs311-html.tar.gz")
DEFAULT_DEV = Path("/work/shared/data/pydocs311_qa/dev.jsonl")
CORPUS_DIRS = ("library/", "tutorial/", "howto/", "faq/", "reference/")
KINDS = {"howto", "howto_multi", "unanswerable"}


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\u00b6", "")).strip()


def load_corpus(tarball: Path) -> dict[str, str]:
    pages: dict[str, str] = {}
    with tarfile.open(tarball, "r:gz") as tf:
        for member in tf.getmembers():
            name = member.name.lstrip("./")
            if not member.isfile() or not name.endswith(".html"):
                continue
            if not name.startswith(CORPUS_DIRS):
                continue
            raw = tf.extractfile(member).read().decode("utf-8")
            soup = BeautifulSoup(raw, "html.parser")
            main = soup.find("div", attrs={"role": "main"}) or soup
            pages[name] = collapse(main.get_text())
    return pages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tarball", type=Path, default=DEFAULT_TARBALL)
    ap.add_argument("--dataset", type=Path, default=HERE / "howto_dev.jsonl")
    ap.add_argument("--dev", type=Path, default=DEFAULT_DEV)
    args = ap.parse_args()

    pages = load_corpus(args.tarball)
    lower_pages = {k: v.lower() for k, v in pages.items()}
    items = [
        json.loads(line)
        for line in args.dataset.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    dev_questions = set()
    if args.dev.exists():
        dev_questions = {
            json.loads(line)["question"].casefold().strip()
            for line in args.dev.read_text().splitlines()
            if line.strip()
        }

    failures: list[str] = []

    def fail(item_id: str, msg: str) -> None:
        failures.append(f"{item_id}: {msg}")

    seen_questions: set[str] = set()
    for n, item in enumerate(items, 1):
        iid = item.get("id", f"<line {n}>")
        if iid != f"howto-{n:03d}":
            fail(iid, f"expected id howto-{n:03d}")
        q = item.get("question", "")
        if not q:
            fail(iid, "empty question")
        if q.casefold() in seen_questions:
            fail(iid, "duplicate question")
        seen_questions.add(q.casefold())
        if q.casefold().strip() in dev_questions:
            fail(iid, "question repeats one in pydocs311_qa/dev.jsonl")
        kind = item.get("kind")
        if kind not in KINDS:
            fail(iid, f"bad kind {kind!r}")
            continue
        if item.get("answerable") is not (kind != "unanswerable"):
            fail(iid, "answerable does not match kind")

        if kind == "unanswerable":
            for key in ("gold_answers", "gold_files", "evidence"):
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
                hits = [p for p, t in lower_pages.items() if term.lower() in t]
                if hits:
                    fail(iid, f"absent term {term!r} occurs in {', '.join(sorted(hits)[:5])}")
            continue

        # answerable
        files = item.get("gold_files") or []
        evidence = item.get("evidence") or []
        if not files:
            fail(iid, "no gold_files")
        if not evidence:
            fail(iid, "no evidence")
        for f in files:
            if f not in pages:
                fail(iid, f"gold file {f} is not a corpus page")
        for frag in evidence:
            cf = collapse(frag)
            if not any(cf in pages.get(f, "") for f in files):
                fail(iid, f"evidence not found in gold files: {frag[:80]!r}")
        # every gold file should contribute at least one fragment
        for f in files:
            if f in pages and not any(collapse(frag) in pages[f] for frag in evidence):
                fail(iid, f"no evidence fragment comes from {f}")

        if kind == "howto":
            groups = [item.get("gold_answers") or []]
            if item.get("gold_answers_all"):
                fail(iid, "howto item should not have gold_answers_all")
        else:
            groups = item.get("gold_answers_all") or []
            if len(groups) < 2:
                fail(iid, "howto_multi needs at least two gold_answers_all groups")
            if item.get("gold_answers"):
                fail(iid, "howto_multi item should have empty gold_answers")
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
    gold_pages = sorted({f for i in items for f in i.get("gold_files", [])})
    traps = sum(1 for i in items if i.get("kind") == "unanswerable" and i.get("lexical_trap"))
    n_ev = sum(len(i.get("evidence", [])) for i in items)
    print(f"corpus pages: {len(pages)}")
    print(f"items: {len(items)}  " + "  ".join(f"{k}={counts[k]}" for k in sorted(counts)))
    print(f"unanswerable with lexical_trap: {traps}")
    print(f"evidence fragments: {n_ev}")
    print(f"distinct gold pages: {len(gold_pages)}")
    if failures:
        print(f"FAIL: {len(failures)} problem(s)")
        for f in failures:
            print("  " + f)
        return 1
    print("OK: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

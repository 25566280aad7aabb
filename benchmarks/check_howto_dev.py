"""Check benchmarks/howto_dev.jsonl against the Python 3.11 docs corpus.

Run:  .venv/bin/python benchmarks/check_howto_dev.py [--tarball PATH] [--dataset PATH]

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
from dev_set_checks import check_items

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data"
DEFAULT_TARBALL = DATA / "pydocs311" / "pydocs311-html.tar.gz"
DEFAULT_DEV = DATA / "pydocs311_qa" / "dev.jsonl"
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

    failures = check_items(
        items,
        prefix="howto",
        kinds=KINDS,
        multi_kind="howto_multi",
        docs=pages,
        known=dev_questions,
        known_name="one in pydocs311_qa/dev.jsonl",
        normalise=collapse,
    )

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

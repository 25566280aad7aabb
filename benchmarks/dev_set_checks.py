"""The checks every dev set of ours passes item by item (check_howto_dev.py, check_demo_dev.py):
ids in order, questions non-empty, new and not a known one, kinds, answerable matching kind;
an unanswerable item's absent terms in no document; an answerable item's evidence found
verbatim in its gold files, every gold file contributing, every gold answer in the evidence,
short and not given away by the question."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping


def collapse(text: str) -> str:
    """Whitespace collapsed to single spaces (how evidence is matched against a document)."""
    return re.sub(r"\s+", " ", text).strip()


def check_items(
    items: list[dict],  # type: ignore[type-arg]
    *,
    prefix: str,
    kinds: set[str],
    multi_kind: str,
    docs: Mapping[str, str],
    known: set[str],
    known_name: str,
    normalise: Callable[[str], str] = collapse,
) -> list[str]:
    """Every problem found, as ``"ID: what"``. ``docs``: each document's text, normalised as
    ``normalise`` does; ``multi_kind``: the kind whose answers are ``gold_answers_all`` groups
    (every other answerable kind has ``gold_answers``); ``known``: questions no item may repeat
    (case-folded), named ``known_name`` in the message."""
    failures: list[str] = []

    def fail(item_id: str, msg: str) -> None:
        failures.append(f"{item_id}: {msg}")

    lower_docs = {k: v.lower() for k, v in docs.items()}
    seen_ids: set[str] = set()
    seen_questions: set[str] = set()
    for n, item in enumerate(items, 1):
        iid = item.get("id", f"<line {n}>")
        if iid in seen_ids:
            fail(iid, "duplicate id")
        seen_ids.add(iid)
        if iid != f"{prefix}-{n:03d}":
            fail(iid, f"expected id {prefix}-{n:03d}")
        q = item.get("question", "")
        asked = q.casefold().strip()
        if not asked:
            fail(iid, "empty question")
        if asked in seen_questions:
            fail(iid, "duplicate question")
        seen_questions.add(asked)
        if asked in known:
            fail(iid, f"question repeats {known_name}")
        kind = item.get("kind")
        if kind not in kinds:
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
                hits = sorted(p for p, t in lower_docs.items() if term.lower() in t)
                if hits:
                    fail(iid, f"absent term {term!r} occurs in {', '.join(hits[:5])}")
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
            if not any(normalise(frag) in docs.get(f, "") for f in files):
                fail(iid, f"evidence not found in gold files: {frag[:80]!r}")
        for f in files:  # every gold file contributes a fragment
            if f in docs and not any(normalise(frag) in docs[f] for frag in evidence):
                fail(iid, f"no evidence fragment comes from {f}")
        if kind == multi_kind:
            groups = item.get("gold_answers_all") or []
            if len(groups) < 2:
                fail(iid, f"{kind} needs at least two gold_answers_all groups")
            if item.get("gold_answers"):
                fail(iid, f"{kind} item should have empty gold_answers")
        else:
            groups = [item.get("gold_answers") or []]
            if item.get("gold_answers_all"):
                fail(iid, f"{kind} item should not have gold_answers_all")
        said = " ".join(normalise(e) for e in evidence).lower()
        for group in groups:
            if not group:
                fail(iid, "empty gold answer group")
            for answer in group:
                if answer.lower() not in said:
                    fail(iid, f"gold answer {answer!r} not in evidence")
                if answer.lower() in q.lower():
                    fail(iid, f"gold answer {answer!r} occurs in the question")
                if len(answer.split()) > 4:
                    fail(iid, f"gold answer {answer!r} longer than 4 words")
    return failures

"""Stale answers and replay on the Python docs: one page changes under 100 answered questions.

The 100 pydocs dev questions are answered by RAGLoop.offline over a copy of the pydocs
knowledge base (bench_answers.py's), each run stored as a trace. Then:

1. the runs are replayed against the unchanged knowledge base: how many come out other than
   the same (a replay must not invent changes);
2. the page the answers cite most is replaced by a rewritten version (every other paragraph of
   its main text taken out) and ingested: which runs are reported stale, against the runs whose
   answers cited that page;
3. every run is replayed: how many questions changed, got better or worse, and of those how
   many had read the page (cited it, or had its chunks among their evidence).

The page is restored before the run ends; the cached knowledge base is never written.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_answers import CACHE, page_of, pydocs_folder, pydocs_items, pydocs_knowledge_base

from ragloop import KnowledgeBase, RAGLoop
from ragloop.evaluation.replay import replay
from ragloop.observability.staleness import stale_sources
from ragloop.observability.traces import TraceRecorder, TraceStore
from ragloop.offline import ENGINES

PARAGRAPH = re.compile(rb"<p>.*?</p>", re.DOTALL)


def copy_of_pydocs(into: Path) -> Path:
    """A copy of the cached pydocs knowledge base (and its saved indexes), same documents."""
    pydocs_knowledge_base().close()  # built and up to date
    source = CACHE / "pydocs311.sqlite"
    target = into / "pydocs.sqlite"
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    for saved in CACHE.glob("pydocs311.sqlite-*.arrays"):
        shutil.copy(saved, into / saved.name.replace("pydocs311.sqlite", "pydocs.sqlite"))
    return target


def rewritten(html: bytes) -> bytes:
    """The page with every other paragraph of its main text taken out."""
    main = html.index(b'role="main"')
    count = 0

    def every_other(paragraph: re.Match[bytes]) -> bytes:
        nonlocal count
        count += 1
        return b"" if count % 2 else paragraph.group(0)

    return html[:main] + PARAGRAPH.sub(every_other, html[main:])


def read_pages(record) -> set[str]:
    """The pages a run's evidence came from (every chunk its searches returned)."""
    pages = set()
    for event in record.events:
        for chunk in event.attributes.get("chunks", []) or []:
            if isinstance(chunk, dict) and isinstance(chunk.get("source"), str):
                pages.add(page_of(chunk["source"]))
    return pages


def run() -> str:
    items = pydocs_items()
    folder = pydocs_folder()
    with tempfile.TemporaryDirectory() as temporary:
        kb = KnowledgeBase(copy_of_pydocs(Path(temporary)))
        store = TraceStore(Path(temporary) / "traces.sqlite")
        started = time.perf_counter()
        with TraceRecorder(store, meta={"engine": "rag", "model": "offline"}):
            engine = RAGLoop.offline(kb)
            for item in items:
                engine.run(item.question)
        answered_s = time.perf_counter() - started
        records = sorted((store.get(r.id) for r in store.list(1000)), key=lambda r: r.started_at)

        def make(name, spec, settings):
            return ENGINES[name](kb, **settings)

        started = time.perf_counter()
        unchanged = replay(records, make)
        replay_s = time.perf_counter() - started

        cited = Counter(c.source for r in records for c in r.cited)
        page, citing = cited.most_common(1)[0]
        path = folder / page
        original = path.read_bytes()
        try:
            path.write_bytes(rewritten(original))
            kb.ingest_changes([path], relative_to=folder)
        finally:
            path.write_bytes(original)
        stale = {r.id for r in records if stale_sources(r, kb.document_version)}
        cited_page = {r.id for r in records if any(c.source == page for c in r.cited)}
        after = replay(records, make)
        kb.close()
        store.close()
    moved = [q for q in after.questions if q.verdict != "same"]
    by_id = {r.id: r for r in records}
    read_it = [
        q
        for q in moved
        if q.before and page in read_pages(by_id[q.before.trace_id]) | set(q.before.cited)
    ]
    counts = ", ".join(f"{n} {v}" for v, n in after.counts.items() if n)
    return "\n".join(
        [
            "## Stale answers and replay: one page changes under 100 answers",
            "",
            "`python benchmarks/run.py bench_replay`. The 100 pydocs dev questions answered by "
            "RAGLoop.offline over a copy of the pydocs knowledge base, each run stored as a "
            "trace; the runs replayed against the unchanged knowledge base; then the page the "
            "answers cite most rewritten (every other paragraph of its main text taken out) and "
            "ingested, the runs reported stale compared with the runs that cited it, and every "
            "run replayed again. A question read the page when its answer cited it or its "
            "searches returned chunks of it.",
            "",
            "| step | result |",
            "|---|---|",
            f"| 100 questions answered and stored | {answered_s:.1f} s |",
            f"| replay against the unchanged knowledge base | {unchanged.counts['same']} same, "
            f"{len(unchanged.questions) - unchanged.counts['same']} other ({replay_s:.1f} s) |",
            f"| page replaced | `{page}`, cited by {citing} answer(s) |",
            f"| runs reported stale | {len(stale)}; the runs that cited the page: "
            f"{len(cited_page)}; the same runs: {stale == cited_page} |",
            f"| replay after the change | {counts} |",
            f"| questions not the same that had read the page | {len(read_it)} of {len(moved)} |",
        ]
    )


if __name__ == "__main__":
    print(run())

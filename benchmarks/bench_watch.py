"""A watched folder: how soon an edit or a deletion is searchable, and a burst of new files.

1. The Python docs folder (374 pages, the pydocs knowledge base of bench_answers.py, MiniLM
   vectors) under a :class:`~ragloop.kb.FolderWatcher`: a page is edited (a paragraph with a
   word no page has is added to ``library/functools.html``) and the time from its save to the
   first search that finds the word is measured; then the page is moved out of the folder and
   the time to the first search that no longer finds it. What each batch read is counted
   (``updated``, ``unchanged``: nothing else should be read). The alternative a user would
   pick without a watcher: ``ragloop ingest --sync`` of the folder after each change (from a
   cron job), whose own run time is measured beside it (the cron interval comes on top).
2. A burst of 1,000 new files written into a watched folder as fast as Python writes them: how
   many batches, the largest, the time until every file is searchable, and the process's
   memory above what it held before the burst (sampled every 20 ms).

The page is restored (and re-ingested by the watcher) before the run ends.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench_answers import pydocs_folder, pydocs_knowledge_base

from ragloop import KnowledgeBase
from ragloop.kb.watch import FolderWatcher, WatchBatch

PAGE = "library/functools.html"
ROUNDS = 5
BURST = 1000
WORD = "zyxquarble"  # in no page


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Watching:
    """A watcher in a thread, its batches gathered."""

    def __init__(self, kb: KnowledgeBase, folder: Path) -> None:
        self.batches: list[WatchBatch] = []
        self.stop = threading.Event()
        self.watcher = FolderWatcher(kb, [folder])
        began = threading.Event()
        sync = self.watcher.sync

        def sync_and_tell() -> WatchBatch:
            batch = sync()
            began.set()
            return batch

        self.watcher.sync = sync_and_tell  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        began.wait(60)

    def run(self) -> None:
        for batch in self.watcher.batches(self.stop):
            self.batches.append(batch)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def settle(watching: Watching, quiet_s: float = 1.0) -> None:
    """Wait until no batch has come for ``quiet_s`` (what a change set off is all listed)."""
    count, since = len(watching.batches), time.perf_counter()
    while time.perf_counter() - since < quiet_s:
        time.sleep(0.05)
        if len(watching.batches) != count:
            count, since = len(watching.batches), time.perf_counter()


def until(condition: Callable[[], bool], limit_s: float = 60) -> float:
    """Seconds until ``condition`` holds (polled every 10 ms)."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > limit_s:
            raise RuntimeError("the watcher never got there")
        time.sleep(0.01)
    return time.perf_counter() - started


def with_paragraph(html: bytes, text: str) -> bytes:
    """The page with a paragraph added after the first one of its main text."""
    main = html.index(b'role="main"')
    end = html.index(b"</p>", main) + len(b"</p>")
    return html[:end] + f"<p>{text}</p>".encode() + html[end:]


def found(kb: KnowledgeBase, word: str) -> bool:
    return any(word in c.text for c in kb.search(word, top_k=3))


def page_section() -> list[str]:
    folder = pydocs_folder()
    kb = pydocs_knowledge_base()
    page = folder / PAGE
    original = page.read_bytes()
    edits, deletions, reads = [], [], []
    watching = Watching(kb, folder)
    try:
        for n in range(ROUNDS):
            word = f"{WORD}{n}"
            before = len(watching.batches)
            page.write_bytes(with_paragraph(original, f"{word} round."))
            edits.append(until(lambda w=word: found(kb, w)))
            settle(watching)  # the batch is listed once the generator hands it over
            batches = watching.batches[before:]
            reads.append(
                (
                    sorted({path for b in batches for path in b.changed + b.removed}),
                    sum(b.report.updated for b in batches),
                    sum(b.report.added + b.report.removed for b in batches),
                )
            )
            aside = Path(tempfile.mkdtemp()) / "functools.html"
            shutil.move(page, aside)
            deletions.append(until(lambda w=word: not found(kb, w)))
            shutil.move(aside, page)
            until(lambda: any(PAGE in c.source for c in kb.search("functools lru_cache")))
            settle(watching)
        page.write_bytes(original)
        until(lambda: not found(kb, f"{WORD}{ROUNDS - 1}"))
    finally:
        watching.close()
        if page.read_bytes() != original:
            page.write_bytes(original)
    started = time.perf_counter()
    sync_runs = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        report = kb.ingest(folder, sync=True)
        sync_runs.append(time.perf_counter() - started)
    kb.close()
    edit = statistics.median(edits)
    sync = statistics.median(sync_runs)
    only_page = all(c == [str(page.resolve())] and u >= 1 and k == 0 for c, u, k in reads)
    return [
        f"### An edited and a deleted page ({ROUNDS} rounds, medians)",
        "",
        "| what | watcher: save to searchable | `ingest --sync` of the folder, one run |",
        "|---|---|---|",
        f"| edit of {PAGE} | **{edit:.2f} s** (max {max(edits):.2f}) | {sync:.2f} s "
        f"({report.unchanged} files unchanged) + the cron interval |",
        f"| page moved out of the folder | **{statistics.median(deletions):.2f} s** (max "
        f"{max(deletions):.2f}) | the same |",
        "",
        "What the watcher looked at for each edit: "
        + ("the edited page and nothing else" if only_page else f"more than the page: {reads}")
        + f" (documents updated per edit: {', '.join(str(u) for _, u, _ in reads)}).",
    ]


def burst_section() -> list[str]:
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) / "burst"
        folder.mkdir()
        kb = KnowledgeBase(Path(temporary) / "burst.sqlite")
        kb.ingest(folder)
        watching = Watching(kb, folder)
        base = rss_mb()
        peak = [base]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                peak.append(rss_mb())
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        for n in range(BURST):
            (folder / f"page{n:04d}.md").write_text(
                f"# Page {n}\n\nItem {n} of the burst, about kettle number {n}.\n"
            )
        written = time.perf_counter() - started
        stored = until(lambda: kb.stats().documents == BURST, 300) + written
        embedded = until(lambda: kb.stats().vectors_missing == 0, 300) + stored
        sampling.set()
        sampler.join()
        watching.close()
        kb.close()
    batches = [b for b in watching.batches if not b.full]
    sizes = [len(b.changed) for b in batches]
    return [
        f"### A burst of {BURST:,} new files",
        "",
        "| files | written in | all in keyword search after | all embedded after | batches | "
        "largest batch | memory above before the burst |",
        "|---|---|---|---|---|---|---|",
        f"| {BURST:,} | {written:.2f} s | {stored:.1f} s | {embedded:.1f} s | {len(batches)} | "
        f"{max(sizes)} files | {max(peak) - base:.0f} MB |",
        "",
        "Times from the first write. A batch stores its files' text first (keyword search finds "
        "them), then embeds their chunks (MiniLM, one chunk a file) a batch of the embedder at "
        "a time, as any ingest does: the memory is the batch's, not the burst's.",
    ]


def run() -> str:
    return "\n".join(
        [
            "## A watched folder: edits, deletions and a burst",
            "",
            "`python benchmarks/run.py bench_watch`. The Python docs folder (374 pages, the "
            "pydocs knowledge base of bench_answers.py, MiniLM vectors) under a FolderWatcher: a "
            "page is edited (a paragraph with a word no page has), and the time from its save "
            "to the first search that finds the word is measured; then the page is moved out "
            "of the folder, and the time to the first search that no longer finds it. The "
            "alternative a user would pick without a watcher, `ragloop ingest --sync` of the "
            "folder after each change (from a cron job), is timed beside it (the cron interval "
            "comes on top). Then a burst of new files written into a watched folder as fast as "
            "Python writes them.",
            "",
            *page_section(),
            "",
            *burst_section(),
        ]
    )


if __name__ == "__main__":
    print(run())

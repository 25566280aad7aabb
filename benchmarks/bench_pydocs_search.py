"""`ragloop search` on the Python docs, end to end: where a one-off search spends its time;
and `ragloop ingest` of the unchanged folder (a copy of the corpus of its own).

A user's first search is a new process: the interpreter starts, the command's modules are
imported, the knowledge base is opened, and its first search loads the keyword and vector
indexes and the model that embeds the question (the knowledge base does the last two at once).
Each figure is a median over processes that each ask a new question (no vector cached), the
kinds of process taking turns so that a machine whose speed drifts slows them alike:

- ``ragloop search QUESTION --kb FILE`` (hybrid, the default) and ``--mode bm25`` (no model);
- the floor: a process importing only the libraries a hybrid search cannot do without (numpy,
  pydantic, click, rich, onnxruntime, tokenizers), and the bare interpreter;
- the split, in a process of its own: imports, opening, the first search, a second search;
  then, in another, the first search's two parts one after the other (indexes, then model
  and embedding).

The knowledge base is the pydocs corpus ingested by ``ragloop ingest`` and ``ragloop kb embed``
into benchmarks/.cache (built the first time, about half an hour on 2 cores; afterwards the
unchanged folder is ingested again in seconds).

    python benchmarks/run.py bench_pydocs_search
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pydocs
from bench_retrieval import CACHE

PYTHON = sys.executable
RUNS = 7
KB = CACHE / "pydocs311-search.sqlite"
FLOOR = "import numpy, pydantic, click, rich.console, rich.table, onnxruntime, tokenizers"
SPLIT = """
import sys, time
started = time.perf_counter()
import ragloop.cli.search
from ragloop.cli.common import open_kb
imported = time.perf_counter()
kb = open_kb(sys.argv[1], create=False)
opened = time.perf_counter()
kb.search(sys.argv[2], top_k=5)
first = time.perf_counter()
kb.search(sys.argv[3], top_k=5)
second = time.perf_counter()
print(imported - started, opened - imported, first - opened, second - first)
"""
PARTS = """
import sys, time
from ragloop.cli.common import open_kb
kb = open_kb(sys.argv[1], create=False)
started = time.perf_counter()
kb.store.load_indexes()
loaded = time.perf_counter()
kb.query_vector(sys.argv[2])
embedded = time.perf_counter()
print(loaded - started, embedded - loaded)
"""


def _once(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, stdout) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def knowledge_base(corpus: Path) -> Path:
    """The cached pydocs knowledge base, ingested (again: unchanged files are skipped) and
    embedded."""
    cli = [PYTHON, "-m", "ragloop"]
    subprocess.run([*cli, "ingest", str(corpus), "--kb", str(KB), "--quiet"], check=True)
    subprocess.run([*cli, "kb", "embed", "--kb", str(KB), "--quiet"], check=True)
    return KB


def reingest(corpus: Path, kb: Path) -> list[float]:
    """Wall seconds of `ragloop ingest` of the unchanged folder (sizes and times as stored:
    no file is read)."""
    command = [PYTHON, "-m", "ragloop", "ingest", str(corpus), "--kb", str(kb), "--quiet"]
    return [_once(command)[0] for _ in range(RUNS)]


def measure(kb: Path, questions: list[str]) -> dict[str, list[tuple[float, float, str]]]:
    asks = iter(questions)
    kinds = {
        "hybrid": lambda: [PYTHON, "-m", "ragloop", "search", next(asks), "--kb", str(kb)],
        "bm25": lambda: [
            *(PYTHON, "-m", "ragloop", "search", next(asks), "--kb", str(kb)),
            *("--mode", "bm25"),
        ],
        "floor": lambda: [PYTHON, "-c", FLOOR],
        "bare": lambda: [PYTHON, "-c", "pass"],
        "split": lambda: [PYTHON, "-c", SPLIT, str(kb), next(asks), next(asks)],
        "parts": lambda: [PYTHON, "-c", PARTS, str(kb), next(asks)],
    }
    for command in kinds.values():  # warm-up: files cached, bytecode compiled
        _once(command())
    runs: dict[str, list[tuple[float, float, str]]] = {kind: [] for kind in kinds}
    for _ in range(RUNS):
        for kind, command in kinds.items():
            runs[kind].append(_once(command()))
    return runs


def run() -> str:
    # a copy of its own: bench_pydocs touches every file of the shared one
    corpus = CACHE / "pydocs311-search-corpus"
    if not corpus.exists():
        shutil.copytree(pydocs.corpus(), corpus)
    kb = knowledge_base(corpus)
    questions = [q.text for q in pydocs.questions(answerable=False)]
    questions = (questions * (1 + 8 * (RUNS + 1) // len(questions)))[: 8 * (RUNS + 1)]
    load = os.getloadavg()[0]
    runs = measure(kb, questions)
    again = reingest(corpus, kb)
    load = max(load, os.getloadavg()[0])

    def wall(kind: str) -> float:
        return statistics.median(r[0] for r in runs[kind])

    def cpu(kind: str) -> float:
        return statistics.median(r[1] for r in runs[kind])

    def part(kind: str, i: int) -> float:
        return statistics.median(float(r[2].split()[i]) for r in runs[kind])

    rows = [
        ("`ragloop search QUESTION --kb pydocs.sqlite` (hybrid, the default)", "hybrid"),
        ("`ragloop search QUESTION --kb pydocs.sqlite --mode bm25` (no model)", "bm25"),
        ("the floor: `python -c '" + FLOOR + "'`", "floor"),
        ("the bare interpreter: `python -c pass`", "bare"),
    ]
    lines = [
        "## `ragloop search` on the Python docs: start-up, open, search; re-ingest",
        "",
        "Command: `python benchmarks/run.py bench_pydocs_search` "
        "(benchmarks/bench_pydocs_search.py). The pydocs knowledge base (374 pages, "
        f"{_chunks(kb):,} chunks, MiniLM vectors); each process asks a new question, so no "
        f"vector is cached. Medians of {RUNS} processes of each kind, the kinds taking turns.",
        "",
        "| process | wall | CPU (user + system) | wall / bare interpreter |",
        "|---|---|---|---|",
    ]
    for label, kind in rows:
        ratio = wall(kind) / wall("bare")
        lines.append(f"| {label} | {wall(kind):.2f} s | {cpu(kind):.2f} s | {ratio:.1f}x |")
    lines += [
        "",
        "Where the hybrid search's time goes (medians, in-process clocks): interpreter start-up "
        f"{wall('bare'):.2f} s, imports {part('split', 0):.2f} s, opening the knowledge base "
        f"{part('split', 1):.2f} s, the first search {part('split', 2):.2f} s, a second search "
        f"{part('split', 3) * 1000:.0f} ms. The first search loads the indexes "
        f"({part('parts', 0):.2f} s) while the model loads and embeds the question "
        f"({part('parts', 1):.2f} s), measured one after the other in a process of their own.",
        "",
        f"`ragloop ingest` of the unchanged folder again (median of {RUNS}): "
        f"**{statistics.median(again):.2f} s** (no file read: sizes and times as stored).",
        "",
        f"Load average during the run: up to {load:.1f} on {os.cpu_count()} cores "
        "(other engineers' jobs): wall times are inflated by the wait for a core; CPU times "
        "and the ratios within the run hold better.",
    ]
    return "\n".join(lines)


def _chunks(kb: Path) -> int:
    from ragloop.kb.knowledge_base import KnowledgeBase

    with KnowledgeBase(kb, embedder=None, create=False) as opened:
        return opened.stats().chunks


if __name__ == "__main__":
    print(run())

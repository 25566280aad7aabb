"""Answers you can trust: does each engine answer right, and does it know when it has not?

1. The Python 3.11 docs (``../shared/data/pydocs311``, 374 pages) and their dev questions
   (``../shared/data/pydocs311_qa/dev.jsonl``: facts, paraphrases, two-part questions, and 25 the
   docs cannot answer), per engine and per kind: accuracy (the answer contains a gold answer,
   every group for two-part questions), confident-but-wrong (a converged / answered stop with a
   wrong answer, or with any answer to an unanswerable question, over all questions), refusal
   (unanswerable questions without a confident stop), page@5 of the evidence, retrievals and
   latency. The engines: one hybrid search answered by the ExtractiveGenerator (it has no
   judge: every answer counts as confident), RAGLoop.offline, AgentLoop.offline and
   ``ragloop ask --engine retrieval``.
2. HotpotQA (every 5th of the 500 questions): the share of answers that contain the gold answer
   (quoted sentences make EM and F1 meaningless) and the same confident-but-wrong rate.

``python benchmarks/bench_answers.py --model SPEC`` runs the same with the LLM components
(``ragloop.resolve_model`` spec, e.g. ``openai:gpt-4o-mini``), so a user with a key can
reproduce it; ``--kb FILE`` reuses a built knowledge base, ``--limit N`` takes the first N
questions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragloop import AgentLoop, ExtractiveGenerator, KnowledgeBase, RAGLoop
from ragloop.components.generators import NO_ANSWER, strip_citations
from ragloop.core.records import Chunk, StopReason
from ragloop.evaluation.configurations import answered_by
from ragloop.offline import answered_retrieval_loop

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PYDOCS = DATA / "pydocs311" / "pydocs311-html.tar.gz"
PYDOCS_QA = DATA / "pydocs311_qa" / "dev.jsonl"
HOTPOT = DATA / "hotpotqa_ircot500" / "hotpotqa_dev500_ircot.jsonl"
CACHE = Path(__file__).resolve().parent / ".cache"
CORPUS_FOLDERS = ("library", "tutorial", "howto", "faq", "reference")
CONFIDENT = {StopReason.CONVERGED, StopReason.ANSWERED}
KINDS = ("fact", "paraphrase", "multi", "unanswerable")
HOTPOT_EVERY = 5


@dataclass(frozen=True)
class Item:
    id: str
    question: str
    kind: str
    gold: tuple[tuple[str, ...], ...]  # groups of alternatives; every group must match
    pages: frozenset[str]


@dataclass
class Run:
    item: Item
    answer: str
    confident: bool
    evidence: list[str]  # sources, best first
    retrievals: int
    seconds: float


@dataclass
class Engine:
    name: str
    answer: Callable[[str], tuple[str, bool, list[Chunk]]]
    runs: list[Run] = field(default_factory=list)


# -- data --------------------------------------------------------------------------------------


def pydocs_items() -> list[Item]:
    items = []
    for line in PYDOCS_QA.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        groups = row.get("gold_answers_all") or ([row["gold_answers"]] if row["answerable"] else [])
        items.append(
            Item(
                row["id"],
                row["question"],
                row["kind"],
                tuple(tuple(g) for g in groups),
                frozenset(row["gold_files"]),
            )
        )
    return items


def pydocs_folder() -> Path:
    """The corpus folders, unpacked once into benchmarks/.cache."""
    folder = CACHE / "pydocs311"
    if not (folder / "library").is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(PYDOCS) as archive:
            members = [m for m in archive.getmembers() if m.name.split("/")[0] in CORPUS_FOLDERS]
            archive.extractall(folder, members=members, filter="data")
    return folder


def pydocs_knowledge_base(path: Path | None = None) -> KnowledgeBase:
    kb = KnowledgeBase(path or CACHE / "pydocs311.sqlite")
    if path is None:
        kb.ingest(pydocs_folder())
    return kb


def page_of(source: str) -> str:
    """A chunk source as a corpus page (``library/functools.html``), whether stored relative
    or absolute."""
    parts = Path(source).parts
    for i, part in enumerate(parts):
        if part in CORPUS_FOLDERS:
            return "/".join(parts[i:])
    return source


def correct(item: Item, answer: str) -> bool:
    text = answer.casefold()
    return bool(item.gold) and all(any(g.casefold() in text for g in group) for group in item.gold)


# -- engines -----------------------------------------------------------------------------------


def engines(kb: KnowledgeBase, model: Any = None) -> list[Engine]:
    generator = ExtractiveGenerator(corpus=kb)
    rag = RAGLoop.offline(kb, model=model)
    agent = AgentLoop.offline(kb, model=model)
    retrieval = answered_retrieval_loop(kb, model=model)

    def one_search(question: str) -> tuple[str, bool, list[Chunk]]:
        chunks = kb.search(question, top_k=5)
        answer = generator.generate(question, chunks).answer
        return answer, answer != NO_ANSWER, chunks

    def loop(engine: RAGLoop) -> Callable[[str], tuple[str, bool, list[Chunk]]]:
        def run(question: str) -> tuple[str, bool, list[Chunk]]:
            result = engine.run(question)
            answered = answered_by(result)
            chunks = answered.chunks if answered else []
            return result.answer, result.stop_reason in CONFIDENT, chunks

        return run

    def agent_run(question: str) -> tuple[str, bool, list[Chunk]]:
        result = agent.run(question)
        return result.answer or "", result.stop_reason in CONFIDENT, list(result.chunks)

    return [
        Engine("one search + ExtractiveGenerator", one_search),
        Engine("RAGLoop.offline", loop(rag)),
        Engine("AgentLoop.offline", agent_run),
        Engine("ask --engine retrieval", loop(retrieval)),
    ]


def measure(kb: KnowledgeBase, engine: Engine, items: list[Item]) -> None:
    for item in items:
        before = kb.searches
        started = time.perf_counter()
        answer, confident, chunks = engine.answer(item.question)
        seconds = time.perf_counter() - started
        pages = list(dict.fromkeys(page_of(c.source) for c in chunks))
        engine.runs.append(
            Run(item, strip_citations(answer), confident, pages, kb.searches - before, seconds)
        )


# -- report ------------------------------------------------------------------------------------


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def summary(runs: list[Run]) -> dict[str, str]:
    answerable = [r for r in runs if r.item.kind != "unanswerable"]
    unanswerable = [r for r in runs if r.item.kind == "unanswerable"]
    right = [r for r in answerable if correct(r.item, r.answer)]
    wrong_confident = [
        r
        for r in runs
        if r.confident and (r.item.kind == "unanswerable" or not correct(r.item, r.answer))
    ]
    refused = [r for r in unanswerable if not r.confident]
    found = [r for r in answerable if r.item.pages & set(r.evidence[:5])]
    seconds = sorted(r.seconds for r in runs)
    p95 = seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))] if seconds else 0.0
    out = {
        "accuracy": pct(len(right), len(answerable)),
        "confident but wrong": pct(len(wrong_confident), len(runs)),
        "refusal": pct(len(refused), len(unanswerable)),
        "page@5": pct(len(found), len(answerable)),
        "retrievals": f"{statistics.mean(r.retrievals for r in runs):.1f}" if runs else "-",
        "p50 s": f"{statistics.median(seconds):.2f}" if seconds else "-",
        "p95 s": f"{p95:.2f}",
    }
    for kind in ("fact", "paraphrase", "multi"):
        of_kind = [r for r in answerable if r.item.kind == kind]
        out[kind] = pct(sum(correct(r.item, r.answer) for r in of_kind), len(of_kind))
    return out


def table(engines_run: list[Engine]) -> list[str]:
    columns = [
        "accuracy",
        "fact",
        "paraphrase",
        "multi",
        "confident but wrong",
        "refusal",
        "page@5",
        "retrievals",
        "p50 s",
        "p95 s",
    ]
    lines = [
        "| engine | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for engine in engines_run:
        row = summary(engine.runs)
        lines.append(f"| {engine.name} | " + " | ".join(row[c] for c in columns) + " |")
    return lines


def failures(engine: Engine, limit: int = 400) -> list[str]:
    out = []
    for r in engine.runs:
        ok = correct(r.item, r.answer) if r.item.kind != "unanswerable" else not r.confident
        if not ok:
            mark = "CONFIDENT" if r.confident else "unsure"
            out.append(f"- {r.item.id} [{r.item.kind}] {mark}: {r.item.question}")
            out.append(f"    gold {r.item.gold} pages {sorted(r.item.pages)} got {r.evidence[:5]}")
            out.append(f"    answer: {r.answer[:limit]!r}")
    return out


def pydocs_section(kb: KnowledgeBase, items: list[Item], model: Any = None) -> list[str]:
    runs = engines(kb, model)
    for engine in runs:
        print(f"  {engine.name} ...", file=sys.stderr, flush=True)
        measure(kb, engine, items)
    return table(runs), runs  # type: ignore[return-value]


def run() -> str:
    kb = pydocs_knowledge_base()
    lines, _ = pydocs_section(kb, pydocs_items())
    return "\n".join(["## Answers on the Python docs", "", *lines])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=Path, help="a built knowledge base of the pydocs corpus")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--engines", default="", help="comma-separated name prefixes")
    parser.add_argument("--failures", action="store_true", help="print what each engine got wrong")
    parser.add_argument("--model", help="a model spec: run the LLM components")
    args = parser.parse_args()
    kb = pydocs_knowledge_base(args.kb)
    items = pydocs_items()[: args.limit or None]
    model = None
    if args.model:
        from ragloop import resolve_model

        model = resolve_model(args.model)
    chosen = engines(kb, model)
    if args.engines:
        prefixes = [p.strip().lower() for p in args.engines.split(",")]
        chosen = [e for e in chosen if any(e.name.lower().startswith(p) for p in prefixes)]
    for engine in chosen:
        print(f"  {engine.name} ...", file=sys.stderr, flush=True)
        measure(kb, engine, items)
    print("\n".join(table(chosen)))
    if args.failures:
        for engine in chosen:
            print(f"\n### {engine.name}")
            print("\n".join(failures(engine)))


if __name__ == "__main__":
    main()

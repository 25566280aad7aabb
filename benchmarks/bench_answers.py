"""Answers you can trust: does each engine answer right, and does it know when it has not?

1. The Python 3.11 docs (``../shared/data/pydocs311``, 374 pages) and their dev questions
   (``../shared/data/pydocs311_qa/dev.jsonl``: facts, paraphrases, two-part questions, and 25
   the docs cannot answer), per engine and per kind: accuracy (the answer contains a gold
   answer, every group for two-part questions), confident-but-wrong (a converged / answered
   stop with a wrong answer, or with any answer to an unanswerable question, over all
   questions), refusal (unanswerable questions without a confident stop), page@5 of the
   evidence the answer came from, retrievals and latency. The engines: one hybrid search
   answered by the ExtractiveGenerator (no judge: it is confident whenever it answers),
   RAGLoop.offline, AgentLoop.offline and ``ragloop ask --engine retrieval``.
2. How well the HeuristicEvaluator's score is calibrated there: the score of the iteration
   RAGLoop.offline answered from, against how often that answer was right.
3. Each engine as a selective answerer on the pydocs questions (answer only when the chance
   that the answer is right reaches a threshold): the risk-coverage curve in short (the
   accuracy of the answers of highest chance at 25/50/75/100% of the questions, and the share
   answered and its accuracy at thresholds 0.3/0.5/0.7/0.9), its area (AURC), the precision of
   the answers at the default target precision 0.5, and refusal precision and recall
   (:mod:`ragloop.evaluation.selective`). The chance is the loops' calibrated probability
   (else the judge's score of the answer they gave), and for one search the
   ExtractiveGenerator's own confidence.
4. HotpotQA (every 4th question: inside bench_eval.py's sample, outside the calibration's):
   the share of answers that contain the gold answer (quoted sentences make EM and F1
   meaningless) and the same confident-but-wrong rate.
5. Questions no one wrote to be unanswerable: HotpotQA and MuSiQue questions asked with their
   gold passages withheld from the knowledge base (benchmarks/withheld.py), the refusal and
   confident-but-wrong rates on them, and the selective figures with them mixed with as many
   answerable questions of the same datasets.
6. The evidence-gap report on pydocs questions half answered: a fact question joined with an
   unanswerable one, in both orders; whether the report names the answered part found and the
   other not found.

``python benchmarks/bench_answers.py --model SPEC`` runs the pydocs part with the LLM
components (a ``ragloop.resolve_model`` spec such as ``openai:gpt-4o-mini``), so a user with a
key can reproduce it; ``--kb FILE`` reuses a built knowledge base, ``--limit N`` takes the
first N questions and ``--failures`` lists what each engine got wrong. ``--withheld N`` runs
only part 5, with N withheld and N answerable questions of each dataset; ``--half-answered``
only part 6.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_retrieval import DATASETS, knowledge_base
from withheld import NAMES, withheld_set

from ragloop import AgentLoop, ExtractiveGenerator, KnowledgeBase, RAGLoop
from ragloop.components.calibration import IDENTITY
from ragloop.components.citations import NO_ANSWER, strip_citations
from ragloop.components.heuristics.questions import question_parts
from ragloop.core.records import Chunk, StopReason
from ragloop.core.records.gaps import shown_answer
from ragloop.evaluation.configurations import answer_chance, answered_by
from ragloop.evaluation.datasets import EvalQuestion, load_dataset
from ragloop.evaluation.metrics import answer_contains
from ragloop.evaluation.selective import (
    DEFAULT_TARGET,
    Judged,
    accuracy_at_coverage,
    at_target,
    aurc,
    expected_calibration_error,
    held_out_at_target,
    refusal_scores,
)
from ragloop.offline import answered_retrieval_loop

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PYDOCS = DATA / "pydocs311" / "pydocs311-html.tar.gz"
PYDOCS_QA = DATA / "pydocs311_qa" / "dev.jsonl"
HOWTO_QA = Path(__file__).resolve().parent / "howto_dev.jsonl"  # ours, asked as users ask
DEMO_QA = Path(__file__).resolve().parent / "demo_dev.jsonl"  # ours, over the demo shop
CACHE = Path(__file__).resolve().parent / ".cache"
CORPUS_FOLDERS = ("library", "tutorial", "howto", "faq", "reference")
CONFIDENT = {StopReason.CONVERGED, StopReason.ANSWERED}
HOTPOT_EVERY = 4
UNANSWERABLE = ("unanswerable", "withheld")  # the kinds of question the documents do not answer
WITHHELD = 30  # withheld questions of each dataset (and as many answerable ones)
HALF_ANSWERED = 16  # fact questions paired with as many unanswerable ones, in both orders
COVERAGES = (0.25, 0.5, 0.75, 1.0)
THRESHOLDS = (0.3, 0.5, 0.7, 0.9)
# what issue 59 asks of an engine that says when it is sure: right over the answerable
# questions (what the answer shows, its closest passages included when it is not sure),
# confident and right over the answerable ones, precision of the confident answers
TRUST_COLUMNS = (
    "right",
    "confident and right",
    "paraphrase: confident and right",
    "confident but wrong",
    "precision",
    "refusal",
    "p50 s",
)
COLUMNS = (
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
)


@dataclass(frozen=True)
class Item:
    id: str
    question: str
    kind: str  # fact | paraphrase | multi | unanswerable
    gold: tuple[tuple[str, ...], ...]  # groups of alternatives; every group must match
    pages: frozenset[str]


@dataclass
class Run:
    item: Item
    answer: str
    confident: bool
    score: float | None  # the chance that the answer is right, when the engine has a judge
    evidence: list[str]  # the pages of the chunks the answer came from, best first
    retrievals: int
    seconds: float
    normalised: bool = False  # right: a gold answer in the answer as SQuAD normalises both
    iterations: list[dict[str, Any]] = field(default_factory=list)
    attempt: str = ""  # the engine's own answer, which ``answer`` shows only when it is sure

    @property
    def right(self) -> bool:
        return self.holds_gold(self.answer)

    @property
    def attempt_right(self) -> bool:
        """Whether the engine's own answer is right (what a calibration of its chance reads)."""
        return self.holds_gold(self.attempt or self.answer)

    def holds_gold(self, text: str) -> bool:
        if self.normalised:
            return bool(self.item.gold) and bool(answer_contains(text, self.item.gold[0]))
        return is_right(text, self.item.gold)


def is_right(answer: str, gold: tuple[tuple[str, ...], ...]) -> bool:
    """The answer contains a gold answer of every group (never, with no gold)."""
    text = answer.casefold()
    return bool(gold) and all(any(g.casefold() in text for g in group) for group in gold)


@dataclass
class Answer:
    text: str
    confident: bool
    chunks: list[Chunk]
    score: float | None = None
    iterations: list[dict[str, Any]] = field(default_factory=list)  # a loop's, for --dump
    attempt: str = ""  # the engine's own answer (``text`` is what a user reads)


@dataclass
class Engine:
    """An engine under test; ``hedges``: it has no stop of its own to stand by an answer, only
    its confidence (one search + the ExtractiveGenerator, which hedges an answer below 0.5):
    as a selective answerer it refuses below the target precision."""

    name: str
    answer: Callable[[str], Answer]
    runs: list[Run] = field(default_factory=list)
    hedges: bool = False


# -- data --------------------------------------------------------------------------------------


def pydocs_items(path: Path = PYDOCS_QA) -> list[Item]:
    """The questions of a dev set of the pydocs corpus (the dev set; ``HOWTO_QA``)."""
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
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
    """The five corpus folders of the tarball, unpacked once into benchmarks/.cache."""
    folder = CACHE / "pydocs311"
    if not (folder / "library").is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(PYDOCS) as archive:
            members = [m for m in archive.getmembers() if m.name.split("/")[0] in CORPUS_FOLDERS]
            archive.extractall(folder, members=members, filter="data")
    return folder


def pydocs_knowledge_base(path: Path | None = None) -> KnowledgeBase:
    """The pydocs knowledge base: ``path`` if given (built already), else built once into
    benchmarks/.cache (re-ingest of unchanged files is skipped)."""
    if path is not None:
        return KnowledgeBase(path)
    kb = KnowledgeBase(CACHE / "pydocs311.sqlite")
    kb.ingest(pydocs_folder())
    return kb


def demo_knowledge_base() -> KnowledgeBase:
    """The demo shop's knowledge base (what ``make demo`` ingests), built once into
    benchmarks/.cache."""
    from ragloop.demo import demo_documents

    CACHE.mkdir(parents=True, exist_ok=True)
    kb = KnowledgeBase(CACHE / "demo.sqlite")
    kb.add_documents(demo_documents())
    return kb


def page_of(source: str) -> str:
    """A chunk source as a corpus page (``library/functools.html``), relative or absolute."""
    parts = Path(source).parts
    for i, part in enumerate(parts):
        if part in CORPUS_FOLDERS:
            return "/".join(parts[i:])
    return source


# -- engines -----------------------------------------------------------------------------------


def iteration_records(result: Any) -> list[dict[str, Any]]:
    """Each iteration of a loop's run in short (for ``--dump``): its judge's score and answer,
    and whether the run's answer came from it."""
    answered = answered_by(result)
    return [
        {
            "score": it.evaluation.score,
            "answer": strip_citations(it.answer),
            "answered": it is answered,
        }
        for it in result.trace
    ]


def engines(kb: KnowledgeBase, model: Any = None, *, raw: bool = False) -> list[Engine]:
    """The engines under test; ``raw``: the offline loops judge with the evaluator's score as
    it comes (the identity calibration, target 0.5), the runs calibrate_confidence.py fits."""
    generator = ExtractiveGenerator(corpus=kb)
    settings: dict[str, Any] = {"calibration": IDENTITY, "target_precision": 0.5} if raw else {}
    rag = RAGLoop.offline(kb, model=model, **settings)
    agent = AgentLoop.offline(kb, model=model, **settings)
    retrieval = answered_retrieval_loop(kb, model=model, **settings)

    def one_search(question: str) -> Answer:
        chunks = kb.search(question, top_k=5)
        out = generator.generate(question, chunks)
        return Answer(out.answer, out.answer != NO_ANSWER, chunks, out.confidence)

    def loop(engine: RAGLoop) -> Callable[[str], Answer]:
        def run(question: str) -> Answer:
            result = engine.run(question)
            answered = answered_by(result)
            chunks = answered.chunks if answered else []
            chance, _, confident = answer_chance(result)  # calibrated, else the judge's score
            shown = shown_answer(result.answer, confident, result.gaps)  # what a user reads
            records = iteration_records(result)
            return Answer(shown, confident, chunks, chance, records, result.answer)

        return run

    def agent_run(question: str) -> Answer:
        result = agent.run(question)
        chance, _, confident = answer_chance(result)  # a chance when its loop judges answers
        shown = shown_answer(result.answer, confident, result.gaps)
        return Answer(shown, confident, list(result.chunks), chance, [], result.answer or "")

    return [
        Engine("one search + ExtractiveGenerator", one_search, hedges=True),
        Engine("RAGLoop.offline", loop(rag)),
        Engine("AgentLoop.offline", agent_run),
        Engine("ask --engine retrieval", loop(retrieval)),
    ]


def measure(kb: KnowledgeBase, engine: Engine, items: list[Item]) -> None:
    for item in items:
        before = kb.searches
        started = time.perf_counter()
        out = engine.answer(item.question)
        seconds = time.perf_counter() - started
        pages = list(dict.fromkeys(page_of(c.source) for c in out.chunks))
        engine.runs.append(
            Run(
                item,
                strip_citations(out.text),
                out.confident,
                out.score,
                pages,
                kb.searches - before,
                seconds,
                iterations=out.iterations,
                attempt=strip_citations(out.attempt or out.text),
            )
        )


# -- report ------------------------------------------------------------------------------------


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def summary(runs: list[Run]) -> dict[str, str]:
    answerable = [r for r in runs if r.item.kind not in UNANSWERABLE]
    unanswerable = [r for r in runs if r.item.kind in UNANSWERABLE]
    wrong = [r for r in runs if r.confident and (r.item.kind in UNANSWERABLE or not r.right)]
    found = [r for r in answerable if r.item.pages & set(r.evidence[:5])]
    seconds = sorted(r.seconds for r in runs)
    out = {
        "accuracy": pct(sum(r.right for r in answerable), len(answerable)),
        "confident but wrong": pct(len(wrong), len(runs)),
        "refusal": pct(sum(not r.confident for r in unanswerable), len(unanswerable)),
        "page@5": pct(len(found), len(answerable)),
        "retrievals": f"{statistics.mean(r.retrievals for r in runs):.1f}" if runs else "-",
        "p50 s": f"{statistics.median(seconds):.2f}" if seconds else "-",
        "p95 s": f"{seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))]:.2f}"
        if seconds
        else "-",
    }
    for kind in ("fact", "paraphrase", "multi"):
        of_kind = [r for r in answerable if r.item.kind == kind]
        out[kind] = pct(sum(r.right for r in of_kind), len(of_kind))
    sure = [r for r in runs if r.confident]
    sure_right = [r for r in sure if r.item.kind not in UNANSWERABLE and r.right]
    out["right"] = out["accuracy"]
    out["confident and right"] = pct(len(sure_right), len(answerable))
    paraphrases = [r for r in answerable if r.item.kind == "paraphrase"]
    out["paraphrase: confident and right"] = pct(
        sum(r.confident and r.right for r in paraphrases), len(paraphrases)
    )
    out["precision"] = pct(len(sure_right), len(sure))
    return out


def table(runs_by_engine: list[Engine], columns: tuple[str, ...] = COLUMNS) -> list[str]:
    lines = ["| engine | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for engine in runs_by_engine:
        row = summary(engine.runs)
        lines.append(f"| {engine.name} | " + " | ".join(row[c] for c in columns) + " |")
    return lines


def reliability(runs: list[Run]) -> list[str]:
    """The judge's score of each answer against how often such answers were right (an
    unanswerable question's answer is never right)."""
    scored = [(r.score, r) for r in runs if r.score is not None]
    lines = ["| score | answers | mean score | right |", "|---|---|---|---|"]
    for low in (0.0, 0.2, 0.4, 0.6, 0.8):
        high = low + 0.2
        inside = [(s, r) for s, r in scored if low <= s < high or (high > 1 and s == 1.0)]
        if inside:
            mean = statistics.mean(s for s, _ in inside)
            right = sum(r.right for _, r in inside) / len(inside)
            lines.append(f"| {low:.1f}-{high:.1f} | {len(inside)} | {mean:.2f} | {right:.2f} |")
    return lines


# -- selective answering ----------------------------------------------------------------------


def judged(engine: Engine) -> list[Judged]:
    """The engine's runs as selective answers (empty when it gives no chance): a question
    the documents do not answer is never answered right; an engine that ``hedges`` stands by
    the answers whose chance reaches the target, the others by their own stop."""
    runs = engine.runs
    if not any(r.score is not None for r in runs):
        return []
    return [
        Judged(
            r.score if r.score is not None else 0.0,
            r.right,
            answerable=r.item.kind not in ("unanswerable", "withheld"),
            confident=None if engine.hedges else r.confident,
        )
        for r in runs
    ]


def stands_by(engine: Engine, run: Run) -> bool:
    """Whether the engine stands by the answer: its own stop, or for one that ``hedges`` a
    chance that reaches the default target (what it does not hedge)."""
    if engine.hedges:
        return run.score is not None and run.score >= DEFAULT_TARGET
    return run.confident


def fraction(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def selective_table(chosen: list[Engine]) -> list[str]:
    """Per engine: AURC, the accuracy of the answers of highest chance at a few coverages, the
    precision and coverage at the default target, refusal precision and recall, ECE."""
    head = ["AURC", *(f"accuracy @ {c:.0%} answered" for c in COVERAGES)]
    head += [f"precision @ {DEFAULT_TARGET:g}", f"answered @ {DEFAULT_TARGET:g}"]
    head += [f"precision @ {DEFAULT_TARGET:g}, own calibration", "answered, own calibration"]
    head += ["refusal precision", "refusal recall", "ECE"]
    lines = ["| engine | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for engine in chosen:
        answers = judged(engine)
        if not answers:
            lines.append(f"| {engine.name} | " + " | ".join("-" for _ in head) + " |")
            continue
        point = at_target(answers, DEFAULT_TARGET)
        refusals = refusal_scores(answers, DEFAULT_TARGET)
        cells = [f"{aurc(answers):.3f}"]
        cells += [fraction(accuracy_at_coverage(answers, c)) for c in COVERAGES]
        cells += [fraction(point.precision), fraction(point.coverage)]
        own = held_out_at_target(answers, DEFAULT_TARGET)
        cells += [fraction(own.precision), fraction(own.coverage)]
        cells += [fraction(refusals.precision), fraction(refusals.recall)]
        cells.append(f"{expected_calibration_error(answers):.3f}")
        lines.append(f"| {engine.name} | " + " | ".join(cells) + " |")
    return lines


def threshold_table(chosen: list[Engine], runs: dict[str, list[Run]] | None = None) -> list[str]:
    """Per engine, answering only at a chance of at least each threshold: the share of
    questions answered and the accuracy of those answers."""
    head = [f"chance >= {t:g}: answered, accuracy" for t in THRESHOLDS]
    lines = ["| engine | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for engine in chosen:
        answers = judged(engine)
        cells = []
        for threshold in THRESHOLDS:
            point = at_target(answers, threshold) if answers else None
            cells.append(
                "-" if point is None else f"{fraction(point.coverage)}, {fraction(point.precision)}"
            )
        lines.append(f"| {engine.name} | " + " | ".join(cells) + " |")
    return lines


SELECTIVE_NOTE = (
    "The chance of an answer: the loops' calibrated probability that it is right (the "
    "HeuristicEvaluator's score of the answer they gave, read through the shipped calibration), "
    "one search's ExtractiveGenerator confidence (the same judge's chance, taken on one search). "
    "Accuracy @ c answered: the accuracy of the answers of highest chance that make up c of the "
    "questions (the risk-coverage curve, read at four points; AURC, its area, is the mean risk = "
    "1 - accuracy over every coverage, 0 best, as Geifman and El-Yaniv define it). Precision @ "
    f"{DEFAULT_TARGET:g}: the accuracy of the answers whose chance reaches the default target "
    "precision, answered: their share of the questions. A refusal is an answer the engine does "
    "not stand by (the loops: no converged or answered stop; one search: an answer it hedges, "
    f"chance below {DEFAULT_TARGET:g}, where the table above counts it confident); refusal "
    "precision: the share of refusals whose answer was not right, refusal recall: the share of "
    "answers not right that were refused. An answer to a question the documents do not answer "
    "is never right. ECE: the expected calibration error (10 bins). Own calibration: the "
    f"precision and share answered at {DEFAULT_TARGET:g} when each answer's chance comes from a "
    "`selective` calibration (`ragloop eval --calibrate`) fitted on the engine's other answers "
    "to these questions (5 folds, 3 shuffles, pooled): what a user who labels questions like "
    "these gets on the next ones."
)


def failures(engine: Engine, limit: int = 400) -> list[str]:
    out = []
    for r in engine.runs:
        ok = r.right if r.item.kind != "unanswerable" else not r.confident
        if not ok:
            mark = "CONFIDENT" if r.confident else "unsure"
            out.append(f"- {r.item.id} [{r.item.kind}] {mark}: {r.item.question}")
            out.append(f"    gold {r.item.gold} pages {sorted(r.item.pages)} got {r.evidence[:5]}")
            out.append(f"    answer: {r.answer[:limit]!r}")
    return out


# -- HotpotQA ----------------------------------------------------------------------------------


def hotpot_items() -> tuple[KnowledgeBase, list[Item]]:
    dataset = load_dataset(DATASETS["HotpotQA"])
    kb = knowledge_base("HotpotQA", dataset, "minilm")
    items = [
        Item(q.id, q.question, "fact", (tuple(q.answers),), frozenset(q.gold))
        for i, q in enumerate(dataset.questions)
        if i % HOTPOT_EVERY == 0
    ]
    return kb, items


def hotpot_section() -> list[str]:
    kb, items = hotpot_items()
    chosen = engines(kb)
    for engine in chosen:
        for item in items:  # HotpotQA's answers are matched as SQuAD does (normalised)
            started = time.perf_counter()
            out = engine.answer(item.question)
            text = strip_citations(out.text)
            run = Run(item, text, out.confident, out.score, [], 0, time.perf_counter() - started)
            run.attempt = strip_citations(out.attempt or out.text)
            engine.runs.append(run)
    lines = [
        "| engine | answer contains the gold answer | confident but wrong | p50 s |",
        "|---|---|---|---|",
    ]
    for engine in chosen:
        runs = engine.runs
        right = [answer_contains(r.answer, r.item.gold[0]) for r in runs]
        wrong = sum(r.confident and not ok for r, ok in zip(runs, right, strict=True))
        p50 = statistics.median(r.seconds for r in runs)
        lines.append(
            f"| {engine.name} | {pct(int(sum(right)), len(runs))} | {pct(wrong, len(runs))} | "
            f"{p50:.2f} |"
        )
    kb.close()
    return [
        f"### HotpotQA ({len(items)} questions: every {HOTPOT_EVERY}th)",
        "",
        "The same engines over the HotpotQA knowledge base of bench_eval.py; an answer is right "
        "when it contains a gold answer (normalised as SQuAD does).",
        "",
        *lines,
    ]


# -- withheld gold passages --------------------------------------------------------------------


def question_item(question: EvalQuestion, kind: str, dataset: str) -> Item:
    return Item(
        f"{dataset}:{question.id}",
        question.question,
        kind,
        (tuple(question.answers),),
        frozenset(question.gold),
    )


def withheld_runs(
    size: int, names: list[str] | None = None, *, raw: bool = False
) -> tuple[list[Engine], list[str]]:
    """Every engine on each dataset's withheld and answerable questions, over the knowledge
    base without the withheld gold passages; the runs of all datasets gathered per engine."""
    gathered: dict[str, Engine] = {}
    notes = []
    for name in NAMES:
        built = withheld_set(name, size)
        items = [question_item(q, "withheld", name) for q in built.withheld]
        items += [question_item(q, "answerable", name) for q in built.answerable]
        hidden = len({g for q in built.withheld for g in q.gold})
        notes.append(
            f"{name}: {len(built.withheld)} withheld and {len(built.answerable)} answerable "
            f"questions, {hidden} gold passages of {built.passages:,} withheld"
        )
        for engine in engines(built.kb, raw=raw):
            if names and not any(engine.name.lower().startswith(p) for p in names):
                continue
            print(f"  {name}: {engine.name} ...", file=sys.stderr, flush=True)
            for item in items:
                started = time.perf_counter()
                out = engine.answer(item.question)
                seconds = time.perf_counter() - started
                text = strip_citations(out.text)
                run = Run(item, text, out.confident, out.score, [], 0, seconds, normalised=True)
                run.iterations = out.iterations
                run.attempt = strip_citations(out.attempt or out.text)
                engine.runs.append(run)
            kept = gathered.setdefault(engine.name, engine)
            if kept is not engine:
                kept.runs.extend(engine.runs)
        built.kb.close()
    return list(gathered.values()), notes


def withheld_table(chosen: list[Engine]) -> list[str]:
    """Per engine, on the withheld questions: refusal (an answer it does not stand by:
    :func:`stands_by`) per dataset and in all, confident but wrong (any answer it stands by:
    wrong, whatever it says), the answers that contain the gold answer anyway; on the
    answerable ones: accuracy and confident."""
    head = ["refusal", *(f"refusal {name}" for name in NAMES), "confident but wrong"]
    head += ["gold answer in the answer anyway", "answerable: accuracy", "answerable: confident"]
    lines = ["| engine | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for engine in chosen:
        withheld = [r for r in engine.runs if r.item.kind == "withheld"]
        answerable = [r for r in engine.runs if r.item.kind == "answerable"]
        refusal = [pct(sum(not stands_by(engine, r) for r in withheld), len(withheld))]
        for name in NAMES:
            of = [r for r in withheld if r.item.id.startswith(f"{name}:")]
            refusal.append(pct(sum(not stands_by(engine, r) for r in of), len(of)))
        cells = [
            *refusal,
            pct(sum(stands_by(engine, r) for r in withheld), len(withheld)),
            pct(sum(r.right for r in withheld), len(withheld)),
            pct(sum(r.right for r in answerable), len(answerable)),
            pct(sum(stands_by(engine, r) for r in answerable), len(answerable)),
        ]
        lines.append(f"| {engine.name} | " + " | ".join(cells) + " |")
    return lines


def withheld_section(
    size: int = WITHHELD,
    names: list[str] | None = None,
    dump: Path | None = None,
    *,
    raw: bool = False,
) -> list[str]:
    chosen, notes = withheld_runs(size, names, raw=raw)
    if dump:
        write_runs(dump, chosen)
    return [
        "### Questions whose gold passages are withheld",
        "",
        "HotpotQA and MuSiQue questions asked with their gold passages deleted from a copy of "
        "the dataset's knowledge base (the standard construction of questions the documents "
        "cannot answer; the distractors stay), beside as many answerable questions of the same "
        "datasets over the same copy (none shares a gold passage with a withheld one), all "
        "outside calibrate_offline.py's fit (HotpotQA: bench_eval.py's sample, yes/no questions "
        "left out; MuSiQue: the whole questions, whose single-hop sub-questions it fits on). "
        + "; ".join(notes)
        + ". An answer is right when it contains a gold answer (normalised as SQuAD does); on "
        "a withheld question any confident answer counts as wrong, even one that contains the "
        "gold answer (the column says how often that happened). Confident: a converged or "
        "answered stop; for one search, an answer it does not hedge (chance >= 0.5).",
        "",
        *withheld_table(chosen),
        "",
        "The withheld and answerable questions together, as selective answering:",
        "",
        *selective_table(chosen),
        "",
        *threshold_table(chosen),
    ]


# -- questions half answered --------------------------------------------------------------------


QUESTION_WORDS = frozenset(
    "what which when where who whom whose why how in on by with does do is are can".split()
)


def joined(first: str, second: str) -> str:
    """Two questions asked as one: "What is X, and on what date is Y?"."""
    head, _, rest = second.partition(" ")
    if head.lower() in QUESTION_WORDS:
        second = f"{head.lower()} {rest}"
    return f"{first.rstrip(' ?')}, and {second}"


def half_answered_items(items: list[Item]) -> list[tuple[str, list[bool], Item]]:
    """Each of the first ``HALF_ANSWERED`` fact questions (by id) joined with the unanswerable
    question of the same place, in both orders: (question, for each of its parts whether the
    docs answer it, the fact question). An unanswerable question may have two parts itself."""
    facts = sorted((i for i in items if i.kind == "fact"), key=lambda i: i.id)
    unanswerable = sorted((i for i in items if i.kind == "unanswerable"), key=lambda i: i.id)
    out = []
    for fact, other in list(zip(facts, unanswerable, strict=False))[:HALF_ANSWERED]:
        answers = [True] * len(question_parts(fact.question))
        not_answered = [False] * len(question_parts(other.question))
        out += [
            (joined(fact.question, other.question), answers + not_answered, fact),
            (joined(other.question, fact.question), not_answered + answers, fact),
        ]
    return out


def half_answered_section(kb: KnowledgeBase) -> list[str]:
    """The evidence-gap report on questions whose one part the docs answer and whose other they
    do not: whether the run stands by an answer (it should not), whether its report splits the
    question in two, and whether it marks the answerable part found and the other not found."""
    asked = half_answered_items(pydocs_items())
    rows = []
    for name, engine in (
        ("RAGLoop.offline", RAGLoop.offline(kb)),
        ("AgentLoop.offline", AgentLoop.offline(kb)),
    ):
        print(f"  half answered: {name} ...", file=sys.stderr, flush=True)
        refused = reported = split = named = gold = 0
        for question, answerable, fact in asked:
            result = engine.run(question)
            gaps = result.gaps
            gold += is_right(result.answer or "", fact.gold)
            refused += not answer_chance(result)[2]
            reported += gaps is not None and bool(gaps.parts)
            if gaps is not None and len(gaps.parts) == len(answerable):
                split += 1
                named += [p.found for p in gaps.parts] == answerable
        n = len(asked)
        cells = [pct(count, n) for count in (refused, reported, split, named, gold)]
        rows.append(f"| {name} | {' | '.join(cells)} |")
    return [
        "### Questions half answered: the evidence-gap report",
        "",
        f"Each of the first {HALF_ANSWERED} fact questions (by id) joined with the unanswerable "
        f'question of the same place, in both orders ("{asked[0][0]}"): {len(asked)} questions '
        "of which the docs answer one part. Not confident: the run does "
        "not stand by an answer; a report: `result.gaps` marks at least one part found or not "
        "found; parts: the report splits the question into the parts of the two (an "
        "unanswerable question may have two); named right: the answerable parts found and the "
        "others not; fact in the answer: the answer (or the best attempt) holds the fact "
        "question's gold answer.",
        "",
        "| engine | not confident | a report | parts | named right | fact in the answer |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


# -- the section -------------------------------------------------------------------------------


def write_runs(path: Path, chosen: list[Engine]) -> None:
    """Every engine's runs, one JSON object a line (``--dump``): to study the scores (a
    calibration, a ranking) without running the engines again."""
    with path.open("w", encoding="utf-8") as out:
        for engine in chosen:
            for r in engine.runs:
                row = {
                    "engine": engine.name,
                    "id": r.item.id,
                    "kind": r.item.kind,
                    "question": r.item.question,
                    "answer": r.answer,
                    "score": r.score,
                    "right": r.right,
                    "attempt_right": r.attempt_right,
                    "confident": r.confident,
                    "iterations": r.iterations,
                }
                out.write(json.dumps(row) + "\n")


def pydocs_runs(kb: KnowledgeBase, items: list[Item], model: Any = None) -> list[Engine]:
    chosen = engines(kb, model)
    for engine in chosen:
        print(f"  {engine.name} ...", file=sys.stderr, flush=True)
        measure(kb, engine, items)
    return chosen


def run() -> str:
    load_before = os.getloadavg()[0]
    kb = pydocs_knowledge_base()
    items = pydocs_items()
    chosen = pydocs_runs(kb, items)
    half_answered = half_answered_section(kb)
    kb.close()
    counts = {k: sum(i.kind == k for i in items) for k in ("fact", "paraphrase", "multi")}
    unanswerable = sum(i.kind == "unanswerable" for i in items)
    return "\n".join(
        [
            "## Answers you can trust: accuracy, confident-but-wrong and refusal",
            "",
            "`python benchmarks/run.py bench_answers`. The Python 3.11 docs (374 pages, default "
            f"settings, offline) and their {len(items)} dev questions: {counts['fact']} facts, "
            f"{counts['paraphrase']} paraphrases, {counts['multi']} two-part questions and "
            f"{unanswerable} the docs do not answer. Accuracy: the answer contains a gold answer "
            "(every part of a two-part question); confident: a converged or answered stop; "
            "confident but wrong is counted over all questions, refusal over the unanswerable "
            "ones; page@5: a gold page among the first five pages the answer's evidence came "
            "from. Targets (issue 15): accuracy >= 70% (facts >= 80%, paraphrases >= 60%, "
            "two-part >= 50%), confident but wrong <= 10%, refusal >= 75%, p50 < 1 s. Before "
            "(as issue 15 reported them): RAGLoop.offline 45.3% accurate, 16.0% confident but "
            "wrong, 92.0% refusal; AgentLoop.offline 44.0%, 66.0%, 0.0%.",
            "",
            *table(chosen),
            "",
            f"Latency moves with the machine's load: 1-minute load average {load_before:.1f} at "
            f"the start, {os.getloadavg()[0]:.1f} after the pydocs runs (2 cores).",
            "",
            "How well the HeuristicEvaluator's score reads as a probability on these questions "
            "(the score of the iteration RAGLoop.offline answered from; fitted on HotpotQA and "
            "MuSiQue by `benchmarks/calibrate_offline.py`, never on these):",
            "",
            *reliability(chosen[1].runs),
            "",
            "### Answering only when likely right: risk and coverage",
            "",
            "The same runs, each engine as a selective answerer (`ragloop eval` reports the same "
            "figures, `ragloop.evaluation.selective`). " + SELECTIVE_NOTE,
            "",
            *selective_table(chosen),
            "",
            *threshold_table(chosen),
            "",
            *half_answered,
            "",
            *hotpot_section(),
            "",
            *withheld_section(),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=Path, help="a built knowledge base of the pydocs corpus")
    parser.add_argument("--limit", type=int, default=0, help="only the first N questions")
    parser.add_argument(
        "--questions",
        type=Path,
        default=PYDOCS_QA,
        help=f"a dev set of the pydocs corpus (default the dev set; ours: {HOWTO_QA.name})",
    )
    parser.add_argument(
        "--demo", action="store_true", help=f"the demo shop and its questions ({DEMO_QA.name})"
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="the offline loops read the judge's score as it comes (the identity calibration, "
        "target 0.5): runs for calibrate_confidence.py",
    )
    parser.add_argument("--engines", default="", help="comma-separated engine name prefixes")
    parser.add_argument("--failures", action="store_true", help="list what each engine got wrong")
    parser.add_argument("--model", help="a model spec: run the LLM components")
    parser.add_argument("--dump", type=Path, help="write every run to this JSON-lines file")
    parser.add_argument(
        "--withheld",
        type=int,
        metavar="N",
        default=0,
        help="only the withheld-passage set: N withheld and N answerable questions a dataset",
    )
    parser.add_argument(
        "--half-answered", action="store_true", help="only the questions half answered"
    )
    args = parser.parse_args()
    if args.half_answered:
        print("\n".join(half_answered_section(pydocs_knowledge_base(args.kb))))
        return
    prefixes = [p.strip().lower() for p in args.engines.split(",") if p.strip()]
    if args.withheld:
        print("\n".join(withheld_section(args.withheld, prefixes, args.dump, raw=args.raw)))
        return
    if args.demo:
        kb = demo_knowledge_base()
        items = pydocs_items(DEMO_QA)[: args.limit or None]
    else:
        kb = pydocs_knowledge_base(args.kb)
        items = pydocs_items(args.questions)[: args.limit or None]
    model = None
    if args.model:
        from ragloop import resolve_model

        model = resolve_model(args.model)
    chosen = engines(kb, model, raw=args.raw)
    if prefixes:
        chosen = [e for e in chosen if any(e.name.lower().startswith(p) for p in prefixes)]
    for engine in chosen:
        print(f"  {engine.name} ...", file=sys.stderr, flush=True)
        measure(kb, engine, items)
    if args.dump:
        write_runs(args.dump, chosen)
    print("\n".join(table(chosen)))
    print("\n" + "\n".join(table(chosen, TRUST_COLUMNS)))
    print("\n" + "\n".join(selective_table(chosen)))
    print("\n" + "\n".join(threshold_table(chosen)))
    for engine in chosen:
        if any(r.score is not None for r in engine.runs):
            print(f"\n{engine.name}: score against right\n" + "\n".join(reliability(engine.runs)))
    if args.failures:
        for engine in chosen:
            print(f"\n### {engine.name}\n" + "\n".join(failures(engine)))


if __name__ == "__main__":
    main()

"""Run configurations over a dataset and score them at equal k.

A configuration answers a question (the text only; gold fields never reach it) with an
:class:`Outcome`: the passage ids it found, best first, and what it cost. The harness scores every
outcome with the same metrics, aggregates them per configuration and per question kind, and
tests each configuration against the baseline with paired tests on the same questions.

A configuration that says how likely each answer is to be right (``Outcome.probability``) is
also scored as a selective answerer (:mod:`ragloop.evaluation.selective`): on the questions with
gold answers and those the documents cannot answer, its risk-coverage curve, AURC, the precision
and coverage of its answers at the target precision, and refusal precision and recall.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ragloop.core.records import Chunk
from ragloop.evaluation.datasets import EvalDataset, EvalQuestion
from ragloop.evaluation.metrics import (
    answer_contains,
    exact_match,
    f1,
    mrr_first,
    mrr_last,
    ndcg,
    passage_recall,
    recall_all,
)
from ragloop.evaluation.selective import DEFAULT_TARGET, Judged, SelectiveMetrics, selective_metrics
from ragloop.evaluation.stats import Comparison, compare

DEFAULT_KS = (2, 5, 10, 20)
COMPARED = ("recall_all@5", "recall_all@10", "ndcg@10", "f1")


class Outcome(BaseModel):
    """What a configuration returned for one question.

    ``probability``: the chance that ``answer`` is right, when the configuration knows it (a
    loop's calibrated probability, else its evaluator's score); ``confident``: whether the
    configuration stands by the answer (a loop that converged, an agent that answered; None:
    when ``probability`` reaches the target precision); ``score``: the evaluator's own score,
    before any calibration (what ``ragloop eval --calibrate`` fits a calibration on).
    """

    ranked: list[str]
    answer: str | None = None
    retrieval_calls: int = 0
    llm_calls: int = 0
    tokens: int = 0
    iterations: int | None = None
    probability: float | None = Field(default=None, ge=0.0, le=1.0)
    confident: bool | None = None
    score: float | None = Field(default=None, ge=0.0, le=1.0)


@runtime_checkable
class Configuration(Protocol):
    """Something to evaluate: a name, whether it is a one-shot baseline, and ``run``."""

    name: str
    baseline: bool

    def run(self, question: str) -> Outcome: ...


class FunctionConfiguration:
    """A configuration from a function ``question -> Outcome``."""

    def __init__(
        self, name: str, function: Callable[[str], Outcome], *, baseline: bool = False
    ) -> None:
        self.name = name
        self.function = function
        self.baseline = baseline

    def run(self, question: str) -> Outcome:
        return self.function(question)


def ranked_passages(chunks: Sequence[Chunk]) -> list[str]:
    """Passage ids (the chunks' sources) in rank order, each once."""
    return list(dict.fromkeys(chunk.source for chunk in chunks))


class QuestionResult(BaseModel):
    question_id: str
    kind: str | None
    ranked: list[str]
    answer: str | None
    metrics: dict[str, float]
    latency_ms: float
    retrieval_calls: int
    llm_calls: int
    tokens: int
    iterations: int | None = None
    probability: float | None = None
    confident: bool | None = None
    score: float | None = None
    right: bool | None = None  # the answer contains a gold answer (None: nothing to judge by)


class Summary(BaseModel):
    """One configuration's means over the questions, and its cost; ``selective``: its
    selective answering, when it gives each answer a probability and the dataset has gold
    answers."""

    name: str
    baseline: bool
    questions: int
    metrics: dict[str, float]
    by_kind: dict[str, dict[str, float]] = Field(default_factory=dict)
    latency_p50_ms: float
    latency_p95_ms: float
    retrieval_calls: float
    llm_calls: float
    tokens: float
    iterations: float | None = None
    selective: SelectiveMetrics | None = None


class EvalReport(BaseModel):
    dataset: str
    ks: list[int]
    target_precision: float = DEFAULT_TARGET
    summaries: list[Summary]
    comparisons: list[Comparison]
    results: dict[str, list[QuestionResult]]

    def summary(self, name: str) -> Summary:
        return next(s for s in self.summaries if s.name == name)

    def comparison(self, candidate: str, metric: str) -> Comparison:
        return next(c for c in self.comparisons if c.candidate == candidate and c.metric == metric)


def is_right(question: EvalQuestion, answer: str | None) -> bool | None:
    """Whether the answer contains a gold answer (normalised as SQuAD does: the harness's
    ``answer_in_prediction``); never, to a question the documents cannot answer; None when the
    question has no gold answer to judge by."""
    if not question.answerable:
        return False
    if not question.answers:
        return None
    return answer is not None and answer_contains(answer, question.answers) == 1.0


def score(question: EvalQuestion, outcome: Outcome, ks: Sequence[int]) -> dict[str, float]:
    """The question's retrieval and answer metrics (none for a question the documents cannot
    answer: it has no gold passage to find and no answer to match)."""
    ranked, gold = outcome.ranked, question.gold
    metrics: dict[str, float] = {}
    if not question.answerable:
        return metrics
    for k in ks:
        metrics[f"recall_all@{k}"] = recall_all(ranked, gold, k)
        metrics[f"passage_recall@{k}"] = passage_recall(ranked, gold, k)
    metrics["mrr_first"] = mrr_first(ranked, gold)
    metrics["mrr_last"] = mrr_last(ranked, gold)
    metrics["ndcg@10"] = ndcg(ranked, gold, 10)
    if outcome.answer is not None and question.answers:
        metrics["em"] = exact_match(outcome.answer, question.answers)
        metrics["f1"] = f1(outcome.answer, question.answers)
        metrics["answer_in_prediction"] = answer_contains(outcome.answer, question.answers)
    return metrics


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = dict.fromkeys(k for row in rows for k in row)
    return {k: statistics.fmean(row[k] for row in rows if k in row) for k in keys}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else 0.0


def judged(results: Sequence[QuestionResult], answerable: dict[str, bool]) -> list[Judged]:
    """The results as :class:`~ragloop.evaluation.selective.Judged` answers: those whose
    rightness is known (gold answers, or a question the documents cannot answer), a result
    without an answer read as chance 0, not stood by. Empty when no result has a
    probability."""
    if not any(r.probability is not None for r in results):
        return []
    return [
        Judged(
            probability=r.probability if r.probability is not None else 0.0,
            right=r.right,
            answerable=answerable.get(r.question_id, True),
            confident=False if r.answer is None else r.confident,
        )
        for r in results
        if r.right is not None
    ]


def _summarise(
    name: str,
    baseline: bool,
    results: list[QuestionResult],
    answers: Sequence[Judged] = (),
    target: float = DEFAULT_TARGET,
) -> Summary:
    by_kind: dict[str, list[dict[str, float]]] = {}
    for result in results:
        by_kind.setdefault(result.kind or "all", []).append(result.metrics)
    latencies = [r.latency_ms for r in results]
    iterations = [r.iterations for r in results if r.iterations is not None]
    return Summary(
        name=name,
        baseline=baseline,
        questions=len(results),
        metrics=_mean([r.metrics for r in results]) if results else {},
        by_kind={kind: _mean(rows) for kind, rows in sorted(by_kind.items())},
        latency_p50_ms=_percentile(latencies, 0.5),
        latency_p95_ms=_percentile(latencies, 0.95),
        retrieval_calls=statistics.fmean(r.retrieval_calls for r in results) if results else 0,
        llm_calls=statistics.fmean(r.llm_calls for r in results) if results else 0,
        tokens=statistics.fmean(r.tokens for r in results) if results else 0,
        iterations=statistics.fmean(iterations) if iterations else None,
        selective=selective_metrics(answers, target) if answers else None,
    )


def evaluate(
    dataset: EvalDataset,
    configurations: Sequence[Configuration],
    *,
    ks: Sequence[int] = DEFAULT_KS,
    baseline: str | None = None,
    on_progress: Callable[[str, int, int], Any] | None = None,
    target_precision: float = DEFAULT_TARGET,
) -> EvalReport:
    """Run every configuration on every question and compare each with the baseline.

    ``baseline`` names the configuration to compare against; by default the one-shot
    configuration (``baseline=True``) with the best recall of all gold at 5.
    ``target_precision`` is where the selective figures are read (the precision and coverage
    of the answers whose probability reaches it; refusals, for a configuration that does not
    say whether it stands by an answer).
    """
    if not 0.0 <= target_precision <= 1.0:
        raise ValueError(f"target_precision must be in [0, 1], got {target_precision!r}")
    results: dict[str, list[QuestionResult]] = {}
    total = len(dataset.questions)
    for configuration in configurations:
        rows = []
        for done, question in enumerate(dataset.questions):
            if on_progress:
                on_progress(configuration.name, done, total)
            started = time.perf_counter()
            outcome = configuration.run(question.question)
            latency = (time.perf_counter() - started) * 1000
            rows.append(
                QuestionResult(
                    question_id=question.id,
                    kind=question.kind,
                    ranked=outcome.ranked[: max(ks)],
                    answer=outcome.answer,
                    metrics=score(question, outcome, ks),
                    latency_ms=round(latency, 3),
                    retrieval_calls=outcome.retrieval_calls,
                    llm_calls=outcome.llm_calls,
                    tokens=outcome.tokens,
                    iterations=outcome.iterations,
                    probability=outcome.probability,
                    confident=outcome.confident,
                    score=outcome.score,
                    right=is_right(question, outcome.answer),
                )
            )
        results[configuration.name] = rows
        if on_progress:
            on_progress(configuration.name, total, total)
    answerable = {q.id: q.answerable for q in dataset.questions}
    summaries = [
        _summarise(
            c.name,
            c.baseline,
            results[c.name],
            judged(results[c.name], answerable),
            target_precision,
        )
        for c in configurations
    ]
    reference = baseline or _best_baseline(summaries)
    comparisons = []
    if reference is not None:
        base_rows = results[reference]
        for summary in summaries:
            if summary.name == reference:
                continue
            for metric in COMPARED:  # on the questions that have an answer
                base = [r.metrics.get(metric) for r in base_rows if answerable[r.question_id]]
                cand = [
                    r.metrics.get(metric)
                    for r in results[summary.name]
                    if answerable[r.question_id]
                ]
                if not base or any(v is None for v in [*base, *cand]):
                    continue
                comparisons.append(
                    compare(metric, reference, base, summary.name, cand)  # type: ignore[arg-type]
                )
    return EvalReport(
        dataset=dataset.name,
        ks=list(ks),
        target_precision=target_precision,
        summaries=summaries,
        comparisons=comparisons,
        results=results,
    )


def _best_baseline(summaries: list[Summary]) -> str | None:
    candidates = [s for s in summaries if s.baseline] or summaries[:1]
    if not candidates:
        return None
    return max(candidates, key=lambda s: s.metrics.get("recall_all@5", 0.0)).name

"""Selective answering: how right a system is when it answers, against how often it answers.

Every function takes the answers to a set of questions as :class:`Judged` records: the chance
the system gave that its answer is right (its evaluator's score, or that score read through a
calibration), whether the answer was right, whether the question can be answered from the
documents at all, and whether the system stood by the answer (``confident``: a loop that
converged, an agent that answered). An answer to a question the documents cannot answer is never
right, whatever it says.

- :func:`risk_coverage`: answer only when the chance reaches a threshold, for each threshold in
  turn (every distinct chance): the share of questions answered (*coverage*) and the share of
  those answers that are right (*accuracy*; *risk* is 1 - accuracy).
- :func:`aurc`: the area under the risk-coverage curve as Geifman and El-Yaniv define it (*Bias-
  Reduced Uncertainty Estimation for Deep Neural Classifiers*, 2019): the answers sorted by
  chance, most likely first, the mean over n of the risk of the first n answers; 0 is best.
- :func:`at_target`: the answers whose chance reaches a target, their share and their precision;
  :func:`accuracy_at_coverage`: the accuracy of the answers of highest chance that make up a
  share of the questions.
- :func:`refusal_scores`: a refusal is an answer the system does not stand by; its precision is
  the share of refusals that were warranted (the answer was not right), its recall the share of
  answers that were not right that the system refused.
- :func:`expected_calibration_error`: how far the chance is from how often such answers are
  right, in ten bins.
- :func:`calibration_check`: a calibration fitted on the answers, judged on the same answers
  (in-sample) and on answers left out of each fit (cross-validated); :func:`held_out_at_target`:
  the cross-validated precision and coverage at one target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

import numpy as np
from pydantic import BaseModel, Field

from ragloop.components.calibration import Calibration, FitMethod

DEFAULT_TARGET = 0.5  # the offline loops' default target precision
CHECK_TARGETS = (0.5, 0.7, 0.9)


@dataclass(frozen=True)
class Judged:
    """One answer as selective answering sees it.

    ``probability``: the chance the system gave that the answer is right; ``right``: whether it
    was; ``answerable``: whether the documents answer the question (when not, the answer is
    never right); ``confident``: whether the system stood by the answer (None: when the
    chance reaches the target asked of the function).
    """

    probability: float
    right: bool
    answerable: bool = True
    confident: bool | None = None

    @property
    def correct(self) -> bool:
        """Right, and to a question that has an answer."""
        return self.right and self.answerable

    def stands_by(self, target: float) -> bool:
        return self.confident if self.confident is not None else self.probability >= target


class CoveragePoint(BaseModel):
    """Answering only when the chance is at least ``threshold``: how many questions are
    answered, their share (``coverage``) and the share of those answers that are right
    (``accuracy``; the risk is 1 - accuracy)."""

    threshold: float
    answered: int
    coverage: float
    accuracy: float


class TargetPoint(BaseModel):
    """The answers whose chance reaches ``target``: how many, their share of all questions
    (``coverage``) and the share of them that are right (``precision``, None when none)."""

    target: float
    answered: int
    coverage: float
    precision: float | None


class RefusalScores(BaseModel):
    """Refusals (answers not stood by) and how well placed they are.

    ``precision``: of the refusals, the share whose answer was not right (None with no
    refusal); ``recall``: of the answers that were not right, the share refused (None when
    every answer was right)."""

    refusals: int
    precision: float | None
    recall: float | None


class SelectiveMetrics(BaseModel):
    """A configuration's selective answering over the questions with gold answers (and those
    the documents cannot answer), at one target precision.

    ``accuracy``: the share of all these questions answered right (coverage 100%);
    ``aurc``: the area under the risk-coverage curve (0 is best); ``precision_at_target`` and
    ``coverage_at_target``: the answers whose chance reaches ``target``; ``confident``: how many
    answers the configuration stood by, ``confident_but_wrong`` the share of all questions
    answered confidently and not right; ``refusal_precision`` and ``refusal_recall``: see
    :class:`RefusalScores`; ``ece``: the expected calibration error; ``curve``: the
    risk-coverage curve, highest threshold first."""

    questions: int
    unanswerable: int
    target: float
    accuracy: float
    aurc: float
    precision_at_target: float | None
    coverage_at_target: float
    confident: int
    confident_but_wrong: float
    refusals: int
    refusal_precision: float | None
    refusal_recall: float | None
    ece: float
    curve: list[CoveragePoint] = Field(default_factory=list)


def _by_chance(answers: Sequence[Judged]) -> list[list[Judged]]:
    """The answers grouped by equal chance, highest first."""
    ordered = sorted(answers, key=lambda a: -a.probability)
    return [list(group) for _, group in groupby(ordered, key=lambda a: a.probability)]


def risk_coverage(answers: Sequence[Judged]) -> list[CoveragePoint]:
    """One point per distinct chance, highest first: answering every question whose chance is
    at least that high. The last point answers every question (coverage 1)."""
    points, answered, right = [], 0, 0
    for group in _by_chance(answers):
        answered += len(group)
        right += sum(a.correct for a in group)
        points.append(
            CoveragePoint(
                threshold=group[0].probability,
                answered=answered,
                coverage=answered / len(answers),
                accuracy=right / answered,
            )
        )
    return points


def accuracy_at_coverage(answers: Sequence[Judged], coverage: float) -> float | None:
    """The accuracy of the answers of highest chance that make up ``coverage`` of the
    questions (at least one answer; a tie at the cut counts its right answers pro rata, as
    :func:`aurc` does). None with no answer."""
    if not answers:
        return None
    wanted = max(1, math.ceil(coverage * len(answers) - 1e-9))
    taken, right = 0, 0.0
    for group in _by_chance(answers):
        share = min(len(group), wanted - taken)
        right += share * sum(a.correct for a in group) / len(group)
        taken += share
        if taken >= wanted:
            break
    return right / taken


def aurc(answers: Sequence[Judged]) -> float:
    """The area under the risk-coverage curve (Geifman and El-Yaniv): the mean, over n = 1 ..
    N, of the share of wrong answers among the n answers of highest chance. Answers of equal
    chance come in no particular order, so within a tie the wrong ones are spread evenly (the
    expected risk over the orders of the tie). 0 when every answer is right; with no answer,
    0."""
    total, before, wrong_before = 0.0, 0, 0.0
    for group in _by_chance(answers):
        wrong = sum(not a.correct for a in group)
        for j in range(1, len(group) + 1):
            total += (wrong_before + j * wrong / len(group)) / (before + j)
        before += len(group)
        wrong_before += wrong
    return total / len(answers) if answers else 0.0


def at_target(answers: Sequence[Judged], target: float = DEFAULT_TARGET) -> TargetPoint:
    """The answers whose chance is at least ``target``: their number, share and precision."""
    chosen = [a for a in answers if a.probability >= target]
    return TargetPoint(
        target=target,
        answered=len(chosen),
        coverage=len(chosen) / len(answers) if answers else 0.0,
        precision=sum(a.correct for a in chosen) / len(chosen) if chosen else None,
    )


def refusal_scores(answers: Sequence[Judged], target: float = DEFAULT_TARGET) -> RefusalScores:
    """Refusal precision and recall. A refusal is an answer not stood by (``confident`` False,
    or, where it is None, a chance below ``target``); it is warranted when the answer was not
    right (a question the documents cannot answer included)."""
    refused = [a for a in answers if not a.stands_by(target)]
    not_right = [a for a in answers if not a.correct]
    warranted = sum(not a.correct for a in refused)
    return RefusalScores(
        refusals=len(refused),
        precision=warranted / len(refused) if refused else None,
        recall=warranted / len(not_right) if not_right else None,
    )


def expected_calibration_error(answers: Sequence[Judged], bins: int = 10) -> float:
    """The mean gap between the chance and how often answers are right, over ``bins`` equal
    bins of the chance ([0, 0.1), ..., [0.9, 1]), each weighted by its share of the answers."""
    if not answers:
        return 0.0
    chance = np.clip(np.array([a.probability for a in answers], dtype=float), 0.0, 1.0)
    right = np.array([a.correct for a in answers], dtype=float)
    index = np.minimum((chance * bins).astype(int), bins - 1)
    gap = 0.0
    for b in range(bins):
        inside = index == b
        if inside.any():
            gap += inside.sum() * abs(chance[inside].mean() - right[inside].mean())
    return float(gap / len(answers))


def selective_metrics(
    answers: Sequence[Judged], target: float = DEFAULT_TARGET
) -> SelectiveMetrics:
    """Every figure of :class:`SelectiveMetrics` for these answers at ``target``."""
    point = at_target(answers, target)
    refusals = refusal_scores(answers, target)
    confident = [a for a in answers if a.stands_by(target)]
    n = len(answers)
    return SelectiveMetrics(
        questions=n,
        unanswerable=sum(not a.answerable for a in answers),
        target=target,
        accuracy=sum(a.correct for a in answers) / n if n else 0.0,
        aurc=aurc(answers),
        precision_at_target=point.precision,
        coverage_at_target=point.coverage,
        confident=len(confident),
        confident_but_wrong=sum(not a.correct for a in confident) / n if n else 0.0,
        refusals=refusals.refusals,
        refusal_precision=refusals.precision,
        refusal_recall=refusals.recall,
        ece=expected_calibration_error(answers),
        curve=risk_coverage(answers),
    )


# -- a calibration, checked ---------------------------------------------------------------------


class CalibrationFigures(BaseModel):
    """How one reading of the scores fares: its expected calibration error and, at each
    target, the share of questions answered and the precision of those answers."""

    label: str
    ece: float
    targets: list[TargetPoint]


class CalibrationCheck(BaseModel):
    """A calibration fitted on ``questions`` answers, and the figures of the score as it
    comes, of the fit on the answers it was fitted on (``in_sample``: flattering, since the
    fit has seen every answer it is judged on) and of fits that never saw the answers they are
    judged on (``cross_validated``: ``folds`` folds of the answers, each answer's chance from
    the fit on the other folds; None with fewer than 3 answers)."""

    calibration: Calibration
    questions: int
    folds: int
    raw: CalibrationFigures
    in_sample: CalibrationFigures
    cross_validated: CalibrationFigures | None


def cross_validated_probabilities(
    scores: Sequence[float],
    right: Sequence[bool],
    *,
    method: FitMethod = "platt",
    folds: int = 5,
    seed: int = 0,
) -> list[float]:
    """Each score's chance from a calibration fitted without it: the answers shuffled (with
    ``seed``) into ``folds`` folds, each fold read through a fit on the others."""
    n = len(scores)
    if n < 3:
        raise ValueError("cross-validation needs at least three labelled answers")
    folds = min(folds, n)
    out = [0.0] * n
    order = np.random.default_rng(seed).permutation(n)
    for held in np.array_split(order, folds):
        kept = sorted(set(range(n)) - {int(i) for i in held})
        fitted = Calibration.fit([scores[i] for i in kept], [right[i] for i in kept], method=method)
        for i in held:
            out[int(i)] = fitted.probability(scores[int(i)])
    return out


def held_out_at_target(
    answers: Sequence[Judged],
    target: float = DEFAULT_TARGET,
    *,
    method: FitMethod = "selective",
    folds: int = 5,
    repeats: int = 3,
) -> TargetPoint:
    """The answers a calibration fitted on *other* answers of the same set lets through at
    ``target``: each answer's chance from a fit on the other folds (``folds`` folds, shuffled
    ``repeats`` times, the answers of every shuffle pooled). What a user who fits a calibration
    on labelled questions like these can expect of the questions that come next."""
    scores = [a.probability for a in answers]
    right = [a.correct for a in answers]
    pooled: list[Judged] = []
    for seed in range(repeats):
        chances = cross_validated_probabilities(
            scores, right, method=method, folds=folds, seed=seed
        )
        pooled += [Judged(p, r) for p, r in zip(chances, right, strict=True)]
    point = at_target(pooled, target)
    return point.model_copy(update={"answered": round(point.answered / repeats)})


def _figures(
    label: str, chances: Sequence[float], right: Sequence[bool], targets: Sequence[float]
) -> CalibrationFigures:
    answers = [Judged(p, r) for p, r in zip(chances, right, strict=True)]
    return CalibrationFigures(
        label=label,
        ece=expected_calibration_error(answers),
        targets=[at_target(answers, t) for t in targets],
    )


def calibration_check(
    scores: Sequence[float],
    right: Sequence[bool],
    *,
    method: FitMethod = "platt",
    targets: Sequence[float] = CHECK_TARGETS,
    folds: int = 5,
    seed: int = 0,
    evaluator: str = "any",
    fitted_on: str = "",
) -> CalibrationCheck:
    """Fit a calibration on evaluator ``scores`` and whether each answer was right (an answer
    to a question the documents cannot answer is not), and judge it in-sample and
    cross-validated, beside the score taken as the chance."""
    calibration = Calibration.fit(
        scores, right, method=method, evaluator=evaluator, fitted_on=fitted_on
    )
    in_sample = [calibration.probability(s) for s in scores]
    held_out = (
        cross_validated_probabilities(scores, right, method=method, folds=folds, seed=seed)
        if len(scores) >= 3
        else None
    )
    return CalibrationCheck(
        calibration=calibration,
        questions=len(scores),
        folds=min(folds, len(scores)),
        raw=_figures("score as is", scores, right, targets),
        in_sample=_figures("fitted, in-sample", in_sample, right, targets),
        cross_validated=(
            _figures(
                f"fitted, {min(folds, len(scores))}-fold cross-validated", held_out, right, targets
            )
            if held_out is not None
            else None
        ),
    )

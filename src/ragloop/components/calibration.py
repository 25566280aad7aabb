"""What an evaluator's score means: the chance that the answer it scored is right.

A :class:`Calibration` maps an evaluator's score in [0, 1] to that chance. It is data, not code:
the shipped default (:data:`IDENTITY`) takes the score as it comes, which holds for the
:class:`~ragloop.HeuristicEvaluator` (its score is a logistic regression fitted on HotpotQA and
MuSiQue questions, BENCHMARKS.md shows how far it holds on the Python docs); a user fits one on
their own labelled questions (``ragloop eval ... --calibrate FILE``, or :meth:`Calibration.fit`)
and points the engines at it (``calibration=``, ``[engine] calibration`` in ``ragloop.toml``).

Three fits. Two read a score as the chance that *this* answer is right: ``platt`` (a logistic
regression on the score: two numbers, smooth, what a hundred labelled questions support) and
``isotonic`` (a monotone step function: no shape assumed, needs more questions). The third,
``selective``, reads a score as the precision of *the answers at least this sure*: of the fitted
answers scored at or above it, the share that was right. That is what a target precision asks
for: with a per-answer chance, the answers whose chance reaches 0.5 are right more often than
half the time (each is at least even, most are better), so their precision overshoots the
target; with ``selective``, the answers a target of 0.5 lets through are right half the time on
the fitted questions (Geifman and El-Yaniv's selection with guaranteed risk, without the
bound). All three keep the order of scores, so a higher score never means a lower chance.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, model_validator

from ragloop.core.errors import ConfigError
from ragloop.core.files import write_atomic

CalibrationMethod = Literal["identity", "platt", "isotonic", "selective"]
FitMethod = Literal["platt", "isotonic", "selective"]
RIDGE = 1e-3  # a little weight decay keeps a Platt fit finite on separable data
MIN_SUPPORT = 10  # answers a selective step's precision is read from, at the least


class Calibration(BaseModel):
    """A map from an evaluator's score to the chance that the answer is right.

    - ``method``: ``identity`` (the score is the chance), ``platt`` (the logistic of ``slope`` times
      the score plus ``intercept``), ``isotonic`` (``thresholds`` and ``values``: the chance of a
      score is the value of the last threshold at or below it) or ``selective`` (the same steps,
      each value the precision of the fitted answers scored at or above its threshold, and
      ``coverages`` the share of the fitted answers that is);
    - ``evaluator``: what the scores came from (``heuristic``, ``llm``, a class name): a
      calibration fitted on one evaluator's scores means nothing for another's;
    - ``fitted_on`` and ``questions``: the labelled data of the fit, and how many questions;
    - ``accuracy``: the share of those answers that were right.
    """

    method: CalibrationMethod = "identity"
    slope: float = 1.0
    intercept: float = 0.0
    thresholds: list[float] = Field(default_factory=list)
    values: list[float] = Field(default_factory=list)
    coverages: list[float] = Field(default_factory=list)
    evaluator: str = "any"
    fitted_on: str = ""
    questions: int = Field(default=0, ge=0)
    accuracy: float | None = Field(default=None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _check_steps(self) -> Calibration:
        if self.method in ("isotonic", "selective"):
            if not self.thresholds or len(self.thresholds) != len(self.values):
                raise ValueError("an isotonic calibration needs as many thresholds as values")
            if any(b < a for a, b in zip(self.thresholds, self.thresholds[1:], strict=False)):
                raise ValueError("isotonic thresholds must be in increasing order")
            if any(not 0.0 <= v <= 1.0 for v in self.values):
                raise ValueError("isotonic values must be in [0, 1]")
            if self.coverages and len(self.coverages) != len(self.thresholds):
                raise ValueError("a selective calibration needs a coverage for each threshold")
        return self

    def probability(self, score: float) -> float:
        """The chance that an answer with this score is right, in [0, 1] (``selective``: the
        precision of the answers scored at least as high)."""
        score = min(max(float(score), 0.0), 1.0)
        if self.method == "identity":
            return score
        if self.method == "platt":
            return 1.0 / (1.0 + math.exp(-(self.slope * score + self.intercept)))
        position = int(np.searchsorted(self.thresholds, score, side="right")) - 1
        return self.values[max(position, 0)]

    def score_for(self, probability: float) -> float:
        """The lowest score whose chance reaches ``probability`` (1.0 when none does below it):
        the score threshold a target precision amounts to."""
        if self.method == "identity":
            return probability
        if self.method in ("isotonic", "selective"):
            for threshold, value in zip(self.thresholds, self.values, strict=True):
                if value >= probability:
                    return threshold
            return 1.0
        low, high = 0.0, 1.0  # monotone: bisect on the score
        if self.probability(high) < probability:
            return 1.0
        for _ in range(40):
            middle = (low + high) / 2
            low, high = (middle, high) if self.probability(middle) < probability else (low, middle)
        return high

    # -- fitting --------------------------------------------------------------------------------
    @classmethod
    def fit(
        cls,
        scores: Sequence[float],
        right: Sequence[bool],
        *,
        method: FitMethod = "platt",
        evaluator: str = "any",
        fitted_on: str = "",
    ) -> Calibration:
        """Fit a calibration to evaluator scores and whether each scored answer was right (an
        answer to a question the documents do not answer is never right): the scores of the
        answers the engine gave, so that what it does to reach an answer is in the fit."""
        if len(scores) != len(right):
            raise ValueError(f"{len(scores)} scores but {len(right)} labels")
        if len(scores) < 2:
            raise ValueError("a calibration needs at least two labelled answers")
        x = np.clip(np.asarray(scores, dtype=float), 0.0, 1.0)
        y = np.asarray(right, dtype=float)
        common = {
            "evaluator": evaluator,
            "fitted_on": fitted_on,
            "questions": len(x),
            "accuracy": round(float(y.mean()), 4),
        }
        if method == "platt":
            slope, intercept = _platt(x, y)
            return cls(method="platt", slope=slope, intercept=intercept, **common)
        if method == "isotonic":
            thresholds, values = _isotonic(x, y)
            return cls(method="isotonic", thresholds=thresholds, values=values, **common)
        thresholds, precisions, coverages = _tail_precisions(x, y)
        return cls(
            method="selective",
            thresholds=thresholds,
            values=precisions,
            coverages=coverages,
            **common,
        )

    def coverage(self, score: float) -> float | None:
        """For a ``selective`` calibration, the share of the fitted answers scored at or above
        this score's step (how much a threshold there answers); None for the others."""
        if self.method != "selective" or not self.coverages:
            return None
        position = int(np.searchsorted(self.thresholds, min(max(score, 0.0), 1.0), side="right"))
        return self.coverages[max(position - 1, 0)]

    # -- files ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the calibration as JSON (atomically); returns the path."""
        target = Path(path)
        write_atomic(target, self.model_dump_json(indent=2) + "\n")
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Calibration:
        """Read a calibration written by :meth:`save` (or ``ragloop eval --calibrate``); a
        missing or malformed file is a :class:`~ragloop.ConfigError` naming it."""
        try:
            return cls.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
        except OSError as exc:
            raise ConfigError("calibration", f"cannot read {path}: {exc.strerror}") from exc
        except ValueError as exc:
            raise ConfigError("calibration", f"{path} is not a calibration: {exc}") from exc


IDENTITY = Calibration()


def _platt(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Logistic regression of ``y`` on ``x`` (Newton steps, a small ridge)."""
    features = np.column_stack([x, np.ones(len(x))])
    weights = np.array([0.0, 0.0])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(features @ weights)))
        gradient = features.T @ (p - y) + RIDGE * weights
        hessian = (features.T * (p * (1 - p))) @ features + RIDGE * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        weights -= step
        if np.abs(step).max() < 1e-9:
            break
    return round(float(weights[0]), 6), round(float(weights[1]), 6)


def _isotonic(x: np.ndarray, y: np.ndarray) -> tuple[list[float], list[float]]:
    """Pool adjacent violators: the monotone step function closest to ``y`` in squared error,
    as (lowest score of each step, chance of the step)."""
    order = np.argsort(x, kind="stable")
    blocks: list[list[float]] = []  # [sum of y, count, lowest score]
    for i in order:
        blocks.append([float(y[i]), 1.0, float(x[i])])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1]:
            total, count, _ = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    thresholds = [0.0] + [b[2] for b in blocks[1:]]
    values = [round(b[0] / b[1], 6) for b in blocks]
    return thresholds, values


def _tail_precisions(x: np.ndarray, y: np.ndarray) -> tuple[list[float], list[float], list[float]]:
    """Steps at the scores fitted: for each, the share right of the answers scored at or above
    it (its tail) and their share of all answers. A step's value is the lowest tail precision
    from it up, so a higher score never reads as a lower precision, and a target lets through
    the answers above the lowest score from which every tail reaches it. Every score is a step
    (not only the isotonic fit's, whose coarse blocks overshoot a target by ten points on a
    hundred questions); steps with the same value are merged. A tail with fewer than
    :data:`MIN_SUPPORT` answers is given the precision of the last one that has enough: three
    right answers in a row at the top say little, and would let a high target through on
    luck."""
    scores = sorted({0.0, *(float(v) for v in x)})
    precisions, coverages = [], []
    supported = 0.0
    for threshold in scores:
        above = x >= threshold
        if above.sum() >= min(MIN_SUPPORT, len(x)):
            supported = float(y[above].mean())
        precisions.append(supported)
        coverages.append(round(float(above.mean()), 6))
    rising = np.minimum.accumulate(np.asarray(precisions)[::-1])[::-1]
    steps: list[tuple[float, float, float]] = []
    for threshold, precision, coverage in zip(scores, rising, coverages, strict=True):
        value = round(float(precision), 6)
        if not steps or value != steps[-1][1]:
            steps.append((round(threshold, 6), value, coverage))
    thresholds, values, shares = (list(column) for column in zip(*steps, strict=True))
    return thresholds, values, shares

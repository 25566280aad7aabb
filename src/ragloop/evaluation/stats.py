"""Is a difference between two configurations real? Paired tests over the same questions.

- :func:`mcnemar`: the exact McNemar test for a binary metric (recall of all gold at k, exact
  match): only the questions where the two disagree count.
- :func:`paired_bootstrap`: for any metric, resample the questions with replacement and see how
  often the difference changes sign (two-sided).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel


class Comparison(BaseModel):
    """``candidate`` minus ``baseline`` on one metric, with its p-value and the test used."""

    metric: str
    baseline: str
    candidate: str
    difference: float
    p_value: float
    test: str
    wins: int | None = None
    losses: int | None = None

    @property
    def significant(self) -> bool:
        return self.p_value < 0.05


def mcnemar(baseline: Sequence[float], candidate: Sequence[float]) -> tuple[float, int, int]:
    """Exact two-sided McNemar p-value for paired 0/1 outcomes, with (wins, losses) of the
    candidate: the binomial test of the discordant pairs against 1/2."""
    if len(baseline) != len(candidate):
        raise ValueError("the two configurations must be scored on the same questions")
    wins = sum(1 for b, c in zip(baseline, candidate, strict=True) if c > b)
    losses = sum(1 for b, c in zip(baseline, candidate, strict=True) if b > c)
    n = wins + losses
    if n == 0:
        return 1.0, 0, 0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail), wins, losses


def paired_bootstrap(
    baseline: Sequence[float], candidate: Sequence[float], *, samples: int = 10_000, seed: int = 7
) -> float:
    """Two-sided p-value that the mean difference is zero, by resampling questions."""
    if len(baseline) != len(candidate):
        raise ValueError("the two configurations must be scored on the same questions")
    diffs = np.asarray(candidate, dtype=float) - np.asarray(baseline, dtype=float)
    if not len(diffs) or not diffs.any():
        return 1.0
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(diffs), size=(samples, len(diffs)))].mean(axis=1)
    below = float((means <= 0).mean())
    above = float((means >= 0).mean())
    return min(1.0, 2 * min(below, above))


def compare(
    metric: str,
    baseline_name: str,
    baseline: Sequence[float],
    candidate_name: str,
    candidate: Sequence[float],
) -> Comparison:
    """McNemar for 0/1 metrics, the paired bootstrap otherwise."""
    difference = float(np.mean(candidate) - np.mean(baseline)) if len(baseline) else 0.0
    binary = all(v in (0.0, 1.0) for v in [*baseline, *candidate])
    if binary:
        p_value, wins, losses = mcnemar(baseline, candidate)
        return Comparison(
            metric=metric,
            baseline=baseline_name,
            candidate=candidate_name,
            difference=difference,
            p_value=p_value,
            test="mcnemar",
            wins=wins,
            losses=losses,
        )
    return Comparison(
        metric=metric,
        baseline=baseline_name,
        candidate=candidate_name,
        difference=difference,
        p_value=paired_bootstrap(baseline, candidate),
        test="paired bootstrap",
    )

"""Calibration: what an evaluator's score means, fitted on labelled answers and kept as data."""

from __future__ import annotations

import json
import random

import pytest

from ragloop import ConfigError
from ragloop.components.calibration import IDENTITY, Calibration


def labelled(n: int = 2000, seed: int = 7) -> tuple[list[float], list[bool]]:
    """Scores whose true chance of being right is 0.2 + 0.6 * score (an overconfident judge
    at the top, an underconfident one at the bottom)."""
    rng = random.Random(seed)
    scores = [rng.random() for _ in range(n)]
    return scores, [rng.random() < 0.2 + 0.6 * s for s in scores]


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_a_fit_recovers_the_chance_behind_the_scores(method):
    scores, right = labelled()
    fitted = Calibration.fit(scores, right, method=method, evaluator="test", fitted_on="synthetic")
    for score in (0.1, 0.5, 0.9):
        assert fitted.probability(score) == pytest.approx(0.2 + 0.6 * score, abs=0.07)
    assert fitted.questions == 2000
    assert fitted.accuracy == pytest.approx(sum(right) / len(right), abs=1e-3)


@pytest.mark.parametrize("method", ["platt", "isotonic", "selective"])
def test_a_higher_score_never_means_a_lower_chance(method):
    scores, right = labelled(300, seed=3)
    fitted = Calibration.fit(scores, right, method=method)
    chances = [fitted.probability(i / 100) for i in range(101)]
    assert chances == sorted(chances)


@pytest.mark.parametrize("method", ["platt", "isotonic", "selective"])
def test_score_for_is_the_lowest_score_reaching_a_chance(method):
    fitted = Calibration.fit(*labelled(), method=method)
    threshold = fitted.score_for(0.6)
    assert fitted.probability(threshold) >= 0.6
    assert fitted.probability(max(threshold - 0.02, 0.0)) < 0.6
    if method == "platt":  # about 0.8 at a score of 1: 0.99 is never reached
        assert fitted.score_for(0.99) == 1.0


def test_a_selective_fit_reads_a_score_as_the_precision_of_the_answers_at_least_as_sure():
    scores, right = labelled()
    fitted = Calibration.fit(scores, right, method="selective")
    for score in (0.0, 0.3, 0.6, 0.9):
        above = [r for s, r in zip(scores, right, strict=True) if s >= score]
        # the true precision above s is the mean of 0.2 + 0.6 * u for u in [s, 1]
        assert fitted.probability(score) == pytest.approx(0.5 + 0.3 * score, abs=0.05)
        assert fitted.probability(score) == pytest.approx(sum(above) / len(above), abs=0.03)
        share = len(above) / len(scores)  # the step's share: from its threshold, at or below s
        assert share - 0.005 <= fitted.coverage(score) <= share + 0.1
    assert Calibration.fit(scores, right, method="platt").coverage(0.5) is None


def test_at_a_selective_threshold_the_answers_given_are_as_precise_as_the_target():
    scores, right = labelled(4000, seed=11)
    per_answer = Calibration.fit(scores, right, method="isotonic")
    selective = Calibration.fit(scores, right, method="selective")
    fresh_scores, fresh_right = labelled(4000, seed=12)

    def precision(calibration: Calibration) -> float:
        given = [
            r
            for s, r in zip(fresh_scores, fresh_right, strict=True)
            if calibration.probability(s) >= 0.6
        ]
        return sum(given) / len(given)

    assert precision(selective) == pytest.approx(0.6, abs=0.03)
    assert precision(per_answer) > 0.65  # each answer at least even: the set overshoots


def test_a_selective_fit_on_a_hundred_answers_meets_the_target_on_the_next_ones():
    # a judge whose chance climbs steeply (0 up to a score of 0.25, 1 from 0.75): the isotonic
    # fit's blocks are coarse on a hundred answers, and the first block whose tail reaches the
    # target let through answers about fourteen points more precise than asked; steps at every
    # score meet it
    misses = []
    for seed in range(40):
        rng = random.Random(seed)
        draws = [
            (s, rng.random() < min(1.0, max(0.0, 2 * s - 0.5)))
            for s in (rng.random() for _ in range(4100))
        ]
        fitted = Calibration.fit(*zip(*draws[:100], strict=True), method="selective")
        given = [r for s, r in draws[100:] if fitted.probability(s) >= 0.6]
        misses.append(sum(given) / len(given) - 0.6)
    assert abs(sum(misses) / len(misses)) < 0.03


def test_a_few_lucky_answers_at_the_top_do_not_let_a_high_target_through():
    # three right answers score highest, then a wide band right a third of the time
    scores = [0.99, 0.98, 0.97] + [0.9 - i / 100 for i in range(60)]
    right = [True, True, True] + [i % 3 == 0 for i in range(60)]
    fitted = Calibration.fit(scores, right, method="selective")
    assert fitted.probability(0.99) <= 0.6  # read from at least ten answers (6 right), not three
    assert fitted.score_for(0.9) == 1.0  # no threshold is known to reach 0.9


def test_a_selective_calibration_needs_a_coverage_per_step():
    with pytest.raises(ValueError, match="coverage"):
        Calibration(method="selective", thresholds=[0.0, 0.5], values=[0.4, 0.6], coverages=[1])


def test_the_identity_takes_the_score_as_the_chance():
    assert IDENTITY.probability(0.37) == 0.37
    assert IDENTITY.score_for(0.7) == 0.7
    assert IDENTITY.probability(1.5) == 1.0  # clipped, never outside [0, 1]


def test_a_saved_calibration_loads_back_the_same(tmp_path):
    fitted = Calibration.fit(*labelled(), method="isotonic", evaluator="heuristic")
    path = fitted.save(tmp_path / "calibration.json")
    again = Calibration.load(path)
    assert again == fitted
    assert json.loads(path.read_text())["method"] == "isotonic"


def test_a_missing_or_malformed_file_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        Calibration.load(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"method": "isotonic", "thresholds": [0.5, 0.1], "values": [0.2, 0.3]}')
    with pytest.raises(ConfigError, match=r"bad\.json is not a calibration"):
        Calibration.load(bad)
    bad.write_text("not json")
    with pytest.raises(ConfigError, match="not a calibration"):
        Calibration.load(bad)


def test_a_fit_needs_labels_for_every_score():
    with pytest.raises(ValueError, match="3 scores but 2 labels"):
        Calibration.fit([0.1, 0.2, 0.3], [True, False])
    with pytest.raises(ValueError, match="at least two"):
        Calibration.fit([0.1], [True])

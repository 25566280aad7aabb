"""Selective answering metrics on small cases computed by hand."""

from __future__ import annotations

import pytest

from ragloop.components.calibration import Calibration
from ragloop.evaluation.selective import (
    Judged,
    accuracy_at_coverage,
    at_target,
    aurc,
    calibration_check,
    cross_validated_probabilities,
    expected_calibration_error,
    refusal_scores,
    risk_coverage,
    selective_metrics,
)

# four answers, most likely first: right, wrong, right, wrong; the first two stood by
FOUR = [
    Judged(0.9, True, confident=True),
    Judged(0.8, False, confident=True),
    Judged(0.7, True, confident=False),
    Judged(0.6, False, confident=False),
]


def test_risk_coverage_answers_more_as_the_threshold_falls():
    curve = risk_coverage(list(reversed(FOUR)))  # the order given does not matter
    assert [(p.threshold, p.answered, p.coverage) for p in curve] == [
        (0.9, 1, 0.25),
        (0.8, 2, 0.5),
        (0.7, 3, 0.75),
        (0.6, 4, 1.0),
    ]
    assert [p.accuracy for p in curve] == pytest.approx([1.0, 0.5, 2 / 3, 0.5])


def test_equal_chances_are_one_point():
    curve = risk_coverage([Judged(0.5, True), Judged(0.5, False), Judged(0.2, True)])
    assert [(p.threshold, p.answered, p.accuracy) for p in curve] == [
        (0.5, 2, 0.5),
        (0.2, 3, pytest.approx(2 / 3)),
    ]


def test_aurc_is_the_mean_risk_of_the_first_n_answers():
    # risks of the first 1, 2, 3, 4 answers: 0, 1/2, 1/3, 2/4
    assert aurc(FOUR) == pytest.approx((0 + 1 / 2 + 1 / 3 + 2 / 4) / 4)
    # the same answers ranked perfectly: 0, 0, 1/3, 2/4 (the least any ranking can have)
    ranked = [Judged(0.9, True), Judged(0.8, True), Judged(0.7, False), Judged(0.6, False)]
    assert aurc(ranked) == pytest.approx((1 / 3 + 2 / 4) / 4)
    assert aurc([Judged(0.3, True), Judged(0.1, True)]) == 0.0
    assert aurc([]) == 0.0


def test_aurc_spreads_the_wrong_answers_of_a_tie_evenly():
    # a tie of one right and one wrong: 1/2 wrong expected at n = 1, 1 of 2 at n = 2
    assert aurc([Judged(0.9, True), Judged(0.9, False)]) == pytest.approx(0.5)
    # then a right answer below: risks 1/2, 1/2, 1/3
    tied = [Judged(0.9, True), Judged(0.9, False), Judged(0.5, True)]
    assert aurc(tied) == pytest.approx((1 / 2 + 1 / 2 + 1 / 3) / 3)


def test_an_answer_to_an_unanswerable_question_is_never_right():
    answers = [Judged(0.9, True, answerable=False), Judged(0.4, True)]
    assert [p.accuracy for p in risk_coverage(answers)] == [0.0, 0.5]
    assert aurc(answers) == pytest.approx((1 + 1 / 2) / 2)
    assert at_target(answers, 0.5).precision == 0.0


def test_accuracy_at_a_coverage():
    assert accuracy_at_coverage(FOUR, 0.25) == 1.0  # the 0.9
    assert accuracy_at_coverage(FOUR, 0.5) == 0.5
    assert accuracy_at_coverage(FOUR, 0.6) == pytest.approx(2 / 3)  # 3 of 4 answers
    assert accuracy_at_coverage(FOUR, 1.0) == 0.5
    assert accuracy_at_coverage(FOUR, 0.0) == 1.0  # at least one answer
    # a tie at the cut: one of the two tied answers is taken, right half the time
    tied = [Judged(0.9, True), Judged(0.5, True), Judged(0.5, False), Judged(0.1, False)]
    assert accuracy_at_coverage(tied, 0.5) == pytest.approx((1 + 0.5) / 2)
    assert accuracy_at_coverage([], 0.5) is None


def test_precision_and_coverage_at_a_target():
    point = at_target(FOUR, 0.75)
    assert (point.answered, point.coverage, point.precision) == (2, 0.5, 0.5)
    assert at_target(FOUR, 0.6).answered == 4  # at the target counts
    none = at_target(FOUR, 0.95)
    assert (none.answered, none.coverage, none.precision) == (0, 0.0, None)


def test_refusal_precision_and_recall():
    scores = refusal_scores(FOUR)
    # refused: the 0.7 (right: unwarranted) and the 0.6 (wrong: warranted); not right: the
    # 0.8 (stood by) and the 0.6 (refused)
    assert (scores.refusals, scores.precision, scores.recall) == (2, 0.5, 0.5)
    # without a stated confidence, the chance against the target decides
    undecided = [Judged(a.probability, a.right) for a in FOUR]
    assert refusal_scores(undecided, 0.85) == refusal_scores(
        [
            Judged(0.9, True, confident=True),
            *(Judged(a.probability, a.right, confident=False) for a in FOUR[1:]),
        ]
    )
    assert refusal_scores([Judged(0.9, True, confident=True)]).precision is None  # no refusal
    assert refusal_scores([Judged(0.9, True, confident=False)]).recall is None  # none wrong
    unanswerable = refusal_scores([Judged(0.2, False, answerable=False, confident=False)])
    assert (unanswerable.precision, unanswerable.recall) == (1.0, 1.0)


def test_expected_calibration_error():
    # each answer in a bin of its own: |0.9 - 1| + |0.8 - 0| + |0.7 - 1| + |0.6 - 0|, over 4
    assert expected_calibration_error(FOUR) == pytest.approx(1.8 / 4)
    # one bin, mean chance 0.75 against 1 right of 2
    assert expected_calibration_error([Judged(0.7, True), Judged(0.8, False)], bins=2) == (
        pytest.approx(0.25)
    )
    assert expected_calibration_error([Judged(1.0, True)]) == 0.0  # 1.0 is in the last bin


def test_selective_metrics_gather_the_figures():
    answers = [*FOUR, Judged(0.95, False, answerable=False, confident=True)]
    m = selective_metrics(answers, 0.75)
    assert (m.questions, m.unanswerable, m.target) == (5, 1, 0.75)
    assert m.accuracy == pytest.approx(2 / 5)
    assert m.aurc == pytest.approx(aurc(answers))
    assert (m.precision_at_target, m.coverage_at_target) == (pytest.approx(1 / 3), 0.6)
    assert m.confident == 3
    assert m.confident_but_wrong == pytest.approx(2 / 5)  # the 0.8 and the unanswerable one
    assert (m.refusals, m.refusal_precision, m.refusal_recall) == (2, 0.5, pytest.approx(1 / 3))
    assert [p.threshold for p in m.curve] == [0.95, 0.9, 0.8, 0.7, 0.6]


def test_cross_validation_reads_each_score_through_a_fit_without_it():
    scores, right = [0.1, 0.2, 0.8, 0.9], [False, False, True, True]
    # leave one out (4 folds of 4): without the 0.8, the steps are 0 below 0.9 and 1 from it
    held_out = cross_validated_probabilities(scores, right, method="isotonic", folds=4)
    assert held_out == [0.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="at least three"):
        cross_validated_probabilities([0.1, 0.9], [False, True])


def test_calibration_check_sets_in_sample_beside_cross_validated():
    scores = [0.1, 0.2, 0.8, 0.9]
    right = [False, False, True, True]
    check = calibration_check(
        scores, right, method="isotonic", folds=4, evaluator="heuristic", fitted_on="four"
    )
    assert isinstance(check.calibration, Calibration)
    assert (check.calibration.evaluator, check.calibration.fitted_on) == ("heuristic", "four")
    assert check.questions == 4
    assert check.folds == 4
    assert check.in_sample.ece == 0.0  # the fit has seen every answer: perfect, in-sample
    assert check.cross_validated is not None
    assert check.cross_validated.ece == pytest.approx(0.25)  # the 0.8 read as 0, and right
    assert [p.target for p in check.raw.targets] == [0.5, 0.7, 0.9]
    assert check.raw.targets[0].precision == 1.0  # the 0.8 and the 0.9
    assert check.cross_validated.targets[0].answered == 1
    few = calibration_check([0.2, 0.8], [False, True])
    assert few.cross_validated is None

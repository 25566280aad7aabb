from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragloop.evaluation.metrics import (
    answer_contains,
    exact_match,
    f1,
    mrr_first,
    mrr_last,
    ndcg,
    normalize_answer,
    passage_recall,
    recall_all,
)
from ragloop.evaluation.stats import compare, mcnemar, paired_bootstrap

RANKED = ["a", "x", "b", "y", "z"]


def test_recall_all_and_passage_recall():
    assert recall_all(RANKED, ["a", "b"], 2) == 0.0
    assert recall_all(RANKED, ["a", "b"], 3) == 1.0
    assert passage_recall(RANKED, ["a", "b"], 2) == 0.5
    assert passage_recall(RANKED, ["a", "q"], 5) == 0.5
    assert recall_all(RANKED, [], 5) == 0.0


def test_mrr_first_and_last():
    assert mrr_first(RANKED, ["b", "a"]) == 1.0
    assert mrr_last(RANKED, ["b", "a"]) == pytest.approx(1 / 3)
    assert mrr_last(RANKED, ["b", "q"]) == 0.0  # not every gold passage found
    assert mrr_first(RANKED, ["q"]) == 0.0


def test_ndcg_binary():
    assert ndcg(["a", "b"], ["a", "b"]) == 1.0
    expected = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert ndcg(["x", "a", "y"], ["a", "b"]) == pytest.approx(expected)
    assert ndcg(["x"], []) == 0.0


def test_answer_metrics_follow_squad():
    assert normalize_answer("The  Danube!") == "danube"
    assert exact_match("the Danube.", ["Danube"]) == 1.0
    assert exact_match("Danube river", ["Danube"]) == 0.0
    assert f1("Danube river", ["the Danube"]) == pytest.approx(2 / 3)
    assert f1("", [""]) == 1.0
    assert f1("x", []) == 0.0
    assert answer_contains("It flows into the Black Sea.", ["Black Sea"]) == 1.0
    assert answer_contains("Blackness", ["Black"]) == 0.0


def test_mcnemar_exact_values():
    # 10 discordant pairs all won by the candidate: p = 2 * 0.5**10
    base, cand = [0] * 10 + [1] * 5, [1] * 10 + [1] * 5
    p, wins, losses = mcnemar(base, cand)
    assert (wins, losses) == (10, 0)
    assert p == pytest.approx(2 * 0.5**10)
    assert mcnemar([1, 0], [1, 0]) == (1.0, 0, 0)
    p, _, _ = mcnemar([0, 1, 0, 1], [1, 0, 1, 0])
    assert p == 1.0
    with pytest.raises(ValueError, match="same questions"):
        mcnemar([0], [0, 1])


def test_paired_bootstrap():
    assert paired_bootstrap([0.1] * 50, [0.1] * 50) == 1.0
    assert paired_bootstrap([0.0] * 40, [0.5] * 40) < 0.001
    noisy_base = [0.5 + 0.01 * (i % 3) for i in range(30)]
    assert paired_bootstrap(noisy_base, list(reversed(noisy_base))) > 0.2


def test_compare_picks_the_test_by_metric_type():
    binary = compare("recall_all@5", "base", [0, 0, 1], "loop", [1, 1, 1])
    assert (binary.test, binary.wins, binary.losses) == ("mcnemar", 2, 0)
    assert binary.difference == pytest.approx(2 / 3)
    continuous = compare("ndcg@10", "base", [0.2, 0.3], "loop", [0.4, 0.5])
    assert continuous.test == "paired bootstrap"


@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60))
def test_property_mcnemar_p_is_a_probability_and_symmetric(pairs):
    base = [float(a) for a, _ in pairs]
    cand = [float(b) for _, b in pairs]
    p, wins, losses = mcnemar(base, cand)
    assert 0.0 <= p <= 1.0
    assert mcnemar(cand, base) == (p, losses, wins)

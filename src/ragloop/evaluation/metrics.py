"""Per-question metrics: retrieval (recall, MRR, nDCG) and answers (exact match, F1).

All retrieval metrics take the ranked, deduplicated list of passage ids a configuration
returned and the question's gold ids; comparing configurations at equal k means cutting every
list to k before scoring.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def recall_all(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """1.0 when every gold passage is in the top k, else 0.0 (a multi-hop question needs all)."""
    return float(set(gold) <= set(ranked[:k])) if gold else 0.0


def passage_recall(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """The share of gold passages in the top k (partial credit)."""
    return len(set(gold) & set(ranked[:k])) / len(set(gold)) if gold else 0.0


def _ranks(ranked: Sequence[str], gold: Sequence[str]) -> list[int]:
    wanted = set(gold)
    return [i for i, pid in enumerate(ranked, 1) if pid in wanted]


def mrr_first(ranked: Sequence[str], gold: Sequence[str]) -> float:
    """1 / rank of the first gold passage found (0 when none is)."""
    ranks = _ranks(ranked, gold)
    return 1.0 / ranks[0] if ranks else 0.0


def mrr_last(ranked: Sequence[str], gold: Sequence[str]) -> float:
    """1 / rank at which the last gold passage is found (0 unless all are): how deep a reader
    must go to hold all the evidence."""
    ranks = _ranks(ranked, gold)
    return 1.0 / ranks[-1] if gold and len(ranks) == len(set(gold)) else 0.0


def ndcg(ranked: Sequence[str], gold: Sequence[str], k: int = 10) -> float:
    """nDCG@k with binary relevance."""
    wanted = set(gold)
    dcg = sum(1.0 / math.log2(i + 1) for i, pid in enumerate(ranked[:k], 1) if pid in wanted)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(wanted), k) + 1))
    return dcg / ideal if ideal else 0.0


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers)) if answers else 0.0


def f1(prediction: str, answers: Sequence[str]) -> float:
    """The best token F1 against any acceptable answer (SQuAD's definition)."""
    best = 0.0
    pred_tokens = normalize_answer(prediction).split()
    for answer in answers:
        gold_tokens = normalize_answer(answer).split()
        common = Counter(pred_tokens) & Counter(gold_tokens)
        overlap = sum(common.values())
        if not pred_tokens or not gold_tokens:
            score = float(pred_tokens == gold_tokens)
        elif overlap == 0:
            score = 0.0
        else:
            precision = overlap / len(pred_tokens)
            recall = overlap / len(gold_tokens)
            score = 2 * precision * recall / (precision + recall)
        best = max(best, score)
    return best


def answer_contains(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when a normalised gold answer occurs inside the normalised prediction (extractive
    answers are sentences, so exact match undersells them)."""
    pred = f" {normalize_answer(prediction)} "
    return float(any(f" {normalize_answer(a)} " in pred for a in answers if normalize_answer(a)))

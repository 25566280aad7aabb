"""BM25Index against a brute-force BM25 written from the formula: same chunks, same order
(index order on ties), same scores, with and without a mask, whatever the number of candidates
relative to ``top_k`` (the index cuts candidates at a fraction of the best score first)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ragloop.kb.index.bm25 import K1, B, BM25Index

VOCABULARY = 6

documents = st.lists(
    st.dictionaries(st.integers(0, VOCABULARY - 1), st.integers(1, 4), max_size=4),
    min_size=1,
    max_size=25,
)


def brute_force(
    docs: list[dict[int, int]], terms: list[int], top_k: int, mask: list[bool] | None
) -> list[tuple[int, float]]:
    lengths = [sum(d.values()) for d in docs]
    average = sum(lengths) / len(docs) or 1.0
    scores = []
    for i, doc in enumerate(docs):
        score = 0.0
        for term in dict.fromkeys(terms):
            n = sum(term in d for d in docs)
            if term not in doc:
                continue
            idf = max(math.log((len(docs) - n + 0.5) / (n + 0.5)), 1e-6)
            tf = doc[term]
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths[i] / average))
        if score > 0 and (mask is None or mask[i]):
            scores.append((i, score))
    scores.sort(key=lambda hit: (-hit[1], hit[0]))
    return scores[:top_k]


def build(docs: list[dict[int, int]]) -> BM25Index:
    postings = [
        (np.array(list(d), dtype=np.uint32), np.array(list(d.values()), dtype=np.uint32))
        for d in docs
    ]
    return BM25Index.build(postings, VOCABULARY)


@given(
    docs=documents,
    terms=st.lists(st.integers(0, VOCABULARY + 1), max_size=5),
    top_k=st.integers(1, 30),
    masked=st.booleans(),
    data=st.data(),
)
def test_search_matches_brute_force_bm25(docs, terms, top_k, masked, data):
    mask = data.draw(st.lists(st.booleans(), min_size=len(docs), max_size=len(docs)))
    mask_array = np.array(mask, dtype=bool) if masked else None
    hits = build(docs).search(terms, top_k, mask_array)
    expected = brute_force(docs, terms, top_k, mask if masked else None)
    # float32 sums: equal scores may differ in the last bits, so compare scores, then the
    # order wherever the expected scores are clearly apart
    assert len(hits) == len(expected)
    for (index, normalised, raw), (want_index, want_score) in zip(hits, expected, strict=True):
        assert math.isclose(raw, want_score, rel_tol=1e-5)
        assert 0.0 < normalised <= 1.0
        if index != want_index:  # a tie swapped by float32 rounding
            assert math.isclose(raw, dict(expected).get(index, math.nan), rel_tol=1e-5)


def test_duplicate_documents_tie_in_index_order():
    docs = [{0: 1}] * 5 + [{1: 1}]
    hits = build(docs).search([0], 3)
    assert [index for index, _, _ in hits] == [0, 1, 2]


def test_many_weak_matches_still_fill_top_k():
    """One strong chunk and many weak ones: the cut at a fraction of the best score holds fewer
    than ``top_k``, so it is lowered until the weak ones fill the list."""
    docs = [{0: 4, 1: 1}] + [{1: 1, 2: 1}] * 20 + [{2: 1}]
    hits = build(docs).search([0, 1], 10)
    assert [index for index, _, _ in hits] == list(range(10))


def test_batch_term_frequencies_are_each_texts_term_frequencies():
    from ragloop.kb.index.bm25 import batch_term_frequencies, term_frequencies

    texts = ["Running tents run", "", "The tent's runners ran", "Über naïve café cafés"]
    batched = batch_term_frequencies(texts)
    assert batched == [term_frequencies(t) for t in texts]
    assert [list(c) for c in batched] == [list(term_frequencies(t)) for t in texts]

"""BM25Index against a brute-force BM25 written from the formula: same chunks, same order
(index order on ties), same scores, with and without a mask, whatever the number of candidates
relative to ``top_k`` (the index cuts candidates at a fraction of the best score first)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ragloop.kb.index.bm25 import K1, B, BM25Index, Within, average_length

VOCABULARY = 6

documents = st.lists(
    st.dictionaries(st.integers(0, VOCABULARY - 1), st.integers(1, 4), max_size=4),
    min_size=1,
    max_size=25,
)


def brute_force(
    docs: list[dict[int, int]],
    terms: list[int],
    top_k: int,
    mask: list[bool] | None,
    within: list[bool] | None = None,
) -> list[tuple[int, float]]:
    """BM25 from the formula; statistics from the documents ``within`` (all when None), and
    only those scored."""
    counted = [d for i, d in enumerate(docs) if within is None or within[i]]
    lengths = [sum(d.values()) for d in docs]
    average = sum(sum(d.values()) for d in counted) / max(len(counted), 1) or 1.0
    scores = []
    for i, doc in enumerate(docs):
        if within is not None and not within[i]:
            continue
        score = 0.0
        for term in dict.fromkeys(terms):
            n = sum(term in d for d in counted)
            if term not in doc:
                continue
            idf = max(math.log((len(counted) - n + 0.5) / (n + 0.5)), 1e-6)
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
    within = data.draw(st.none() | st.lists(st.booleans(), min_size=len(docs), max_size=len(docs)))
    index = build(docs)
    scope = None if within is None else index.within(np.array(within, dtype=bool))
    hits = index.search(terms, top_k, mask_array, scope)
    expected = brute_force(docs, terms, top_k, mask if masked else None, within)
    # float32 sums: equal scores may differ in the last bits, so compare scores, then the
    # order wherever the expected scores are clearly apart
    assert len(hits) == len(expected)
    for (index, normalised, raw), (want_index, want_score) in zip(hits, expected, strict=True):
        assert math.isclose(raw, want_score, rel_tol=1e-5)
        assert 0.0 < normalised <= 1.0
        if index != want_index:  # a tie swapped by float32 rounding
            assert math.isclose(raw, dict(expected).get(index, math.nan), rel_tol=1e-5)


@given(
    docs=documents,
    terms=st.lists(st.integers(0, VOCABULARY + 1), max_size=5),
    top_k=st.integers(1, 30),
    data=st.data(),
)
def test_a_scoped_search_scores_exactly_as_an_index_of_its_chunks_alone(docs, terms, top_k, data):
    """Statistics within a scope: the same floats as an index built from the chunks in it
    (so nothing outside moves a score, not even in the last bit), in the same order."""
    within = data.draw(st.lists(st.booleans(), min_size=len(docs), max_size=len(docs)))
    positions = [i for i, kept in enumerate(within) if kept]
    index = build(docs)
    hits = index.search(terms, top_k, within=index.within(np.array(within, dtype=bool)))
    alone = build([docs[i] for i in positions]).search(terms, top_k) if positions else []
    assert hits == [(positions[i], score, raw) for i, score, raw in alone]


def test_weights_at_query_time_are_the_weights_built():
    """A scoped search weighs postings as the build did, bit for bit: the scope of every
    chunk (which skips that work) and any other give the same score to the same chunk."""
    index = build([{0: 1, 1: 2}, {1: 1, 3: 7}, {2: 3, 0: 1}, {0: 2, 1: 5, 2: 1}])
    every = np.ones(4, dtype=bool)
    assert index.within(every) is None  # searched as unscoped ...
    built = np.zeros(4, dtype=np.float32)
    for term in (0, 1, 2):
        start, end = index.ptr[term], index.ptr[term + 1]
        built[index.docs[start:end]] += index.weights[start:end]
    # ... and weighed at query time all the same
    scores, idfs = index._scoped_scores(
        [0, 1, 2], Within(every, 4, average_length(index.lengths, None))
    )
    assert scores.tobytes() == built.tobytes()
    assert idfs.tobytes() == index.idfs[[0, 1, 2]].tobytes()


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

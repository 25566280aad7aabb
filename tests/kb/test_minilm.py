"""The packaged MiniLM embedder (ragloop.kb.embedding.embedders): batches bounded in padded word
pieces and texts, run side by side, give each text the vector it gets alone."""

from __future__ import annotations

import numpy as np
import pytest

from ragloop.core.errors import ConfigError
from ragloop.kb.embedding.embedders import MiniLMEmbedder

TEXTS = [
    "lru_cache",
    "How do I read a file line by line?",
    "The logging levels: DEBUG 10, INFO 20, WARNING 30, ERROR 40, CRITICAL 50. " * 12,
    "functools.lru_cache(maxsize=128) wraps a function with a memoizing callable.",
    "",
    "Ünïcödé text, emoji 🐍 and tabs\tstay text.",
] * 5


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder(threads=2)


def test_batches_hold_at_most_the_budget_and_size():
    embedder = MiniLMEmbedder.__new__(MiniLMEmbedder)
    embedder.batch_tokens, embedder.batch_size = 100, 4
    lengths = [3, 90, 10, 10, 10, 10, 10, 200, 50, 20]
    batches = embedder.batches(lengths)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        widest = max(lengths[i] for i in batch)
        assert len(batch) <= 4
        assert len(batch) == 1 or len(batch) * widest <= 100  # a text wider than it goes alone
    order = [lengths[i] for batch in batches for i in batch]
    assert order == sorted(order)  # similar lengths together: little padding


def test_batched_and_parallel_vectors_equal_each_text_alone(minilm):
    together = np.asarray(minilm.embed(TEXTS))
    alone = np.asarray([minilm.embed([text])[0] for text in TEXTS[:6]] * 5)
    one_thread = np.asarray(MiniLMEmbedder(threads=1, batch_tokens=64).embed(TEXTS))
    assert together.shape == (len(TEXTS), 384)
    assert np.allclose(together, alone, atol=1e-5)
    assert np.allclose(together, one_thread, atol=1e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def test_the_first_word_pieces_are_read():
    short = MiniLMEmbedder(max_length=16)
    long_text = "alpha beta gamma " * 40
    vectors = np.asarray(short.embed([long_text, long_text + " omega delta"]))
    assert np.allclose(vectors[0], vectors[1], atol=1e-6)  # past the 16th word piece: unread


@pytest.mark.parametrize(
    "options", [{"max_length": 4}, {"batch_size": 0}, {"batch_tokens": 0}, {"threads": 0}]
)
def test_bad_settings_are_refused(options):
    with pytest.raises(ConfigError):
        MiniLMEmbedder(**options)


def test_a_lone_question_gives_back_the_memory_its_run_grew():
    embedder = MiniLMEmbedder(threads=1)
    embedder._session = recording = RecordingSession(embedder._session)
    embedder.embed(["lru_cache maxsize"])
    assert recording.shrinks == [True]


class RecordingSession:
    """The real session, recording whether each run asked ONNX Runtime to shrink its arena."""

    def __init__(self, session) -> None:
        self.session = session
        self.shrinks: list[bool] = []

    def run(self, outputs, inputs, options=None):
        entry = "memory.enable_memory_arena_shrinkage"
        self.shrinks.append(options is not None and options.get_run_config_entry(entry) == "cpu:0")
        return self.session.run(outputs, inputs, options)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_last_batch_of_a_call_gives_back_the_memory_the_call_grew(threads):
    embedder = MiniLMEmbedder(threads=threads, batch_size=4)
    embedder._session = recording = RecordingSession(embedder._session)
    vectors = embedder.embed(TEXTS)
    assert len(recording.shrinks) > 1
    assert recording.shrinks.count(True) == 1  # once a call, not every batch (10% slower)
    alone = MiniLMEmbedder(threads=1)
    np.testing.assert_allclose(vectors[:6], [alone.embed([t])[0] for t in TEXTS[:6]], atol=1e-5)

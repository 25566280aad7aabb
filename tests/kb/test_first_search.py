"""A process's first search and an unchanged re-ingest do only the work they need (issue 16):
the first search embeds the question while the store loads its indexes; re-ingesting an
unchanged folder neither reads the link graph nor writes to the file."""

from __future__ import annotations

import threading

import pytest

from ragloop import Document
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.kb.stores.sqlite.store import SQLiteStore
from ragloop.testing import HashEmbedder
from ragloop.testing.conformance import write_corpus


class WaitingEmbedder(HashEmbedder):
    """Embeds a query only once the store has started loading its indexes: a knowledge base
    that did the two one after the other would wait here forever (bounded by a timeout)."""

    def __init__(self, loading: threading.Event) -> None:
        super().__init__(64)
        self.loading = loading
        self.overlapped: list[bool] = []

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        self.overlapped.append(self.loading.wait(timeout=10))
        return self.embed(texts)


@pytest.fixture
def kb_file(tmp_path):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=HashEmbedder(64)) as kb:
        kb.ingest(write_corpus(tmp_path / "docs"))
    return path


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
def test_the_first_search_embeds_the_question_while_the_indexes_load(kb_file, monkeypatch, mode):
    loading = threading.Event()
    loaded: list[tuple[bool, bool]] = []
    load_indexes = SQLiteStore.load_indexes

    def load_while_watched(self, *, keyword=True, dense=True):
        loaded.append((keyword, dense))
        loading.set()
        load_indexes(self, keyword=keyword, dense=dense)

    monkeypatch.setattr(SQLiteStore, "load_indexes", load_while_watched)
    embedder = WaitingEmbedder(loading)
    with KnowledgeBase(kb_file, embedder=embedder) as kb:
        first = kb.search("tent weight", top_k=3, mode=mode)
        assert embedder.overlapped == [True]
        assert loaded == [(mode == "hybrid", True)]
        # the vector is cached now: no second embedding, nothing loaded beside it
        assert kb.search("tent weight", top_k=3, mode=mode) == first
        assert embedder.overlapped == [True]
        assert len(loaded) == 1
    with KnowledgeBase(kb_file, embedder=HashEmbedder(64)) as plain:
        expected = plain.search(
            "tent weight", top_k=3, mode=mode, vector=plain.query_vector("tent weight")
        )
    assert [(c.id, c.score) for c in first] == [(c.id, c.score) for c in expected]


def test_an_error_loading_the_indexes_is_raised_after_the_embedding_ends(kb_file, monkeypatch):
    def broken(self, *, keyword=True, dense=True):
        raise OSError("disk gone")

    monkeypatch.setattr(SQLiteStore, "load_indexes", broken)
    with (
        KnowledgeBase(kb_file, embedder=HashEmbedder(64)) as kb,
        pytest.raises(OSError, match="disk gone"),
    ):
        kb.search("tent weight")


def test_an_unchanged_reingest_reads_no_link_graph_and_writes_nothing(tmp_path, monkeypatch):
    docs = write_corpus(tmp_path / "docs")
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=HashEmbedder(64)) as kb:
        kb.ingest(docs)
        generation = kb.store._generation()
    reads: list[int] = []
    link_targets = SQLiteStore.link_targets

    def counted(self):
        reads.append(1)
        return link_targets(self)

    monkeypatch.setattr(SQLiteStore, "link_targets", counted)
    with KnowledgeBase(path, embedder=HashEmbedder(64)) as kb:
        report = kb.ingest(docs)
        assert (report.unchanged, report.added, report.updated) == (4, 0, 0)
        assert reads == []
        # a reader's loaded indexes stay valid: the file's generation did not move
        assert kb.store._generation() == generation
        (docs / "camping" / "tents.md").write_text("# Tents\n\nThe Ridgeline 3 tent weighs 2 kg.\n")
        assert kb.ingest(docs).updated == 1
        assert reads == [1]  # read once, when the changed file was written


def test_a_query_with_nothing_to_embed_finds_no_vector_neighbours(tmp_path):
    """A query of a control character embeds to the zero vector: no passage is near it, which
    is no error (found by the server's bad-text property test)."""
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder="hash") as kb:
        kb.add_documents([Document(text="The Skylark 2 weighs 1.6 kg.", source="a.md")])
        assert kb.search("\x1b", mode="dense") == []
        assert kb.search("\x1b") == []

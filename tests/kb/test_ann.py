"""Approximate dense search (ragloop.kb.index.ann) in the SQLite store, with the size threshold
lowered so a small knowledge base uses it: candidates from the HNSW graph ranked by exact scores,
the graph saved beside the file and mapped by the next store, extended when chunks are appended,
rebuilt when they change, never used for scoped searches."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from ragloop.kb.index import ann
from ragloop.kb.knowledge_base import Document, KnowledgeBase
from ragloop.testing import HashEmbedder

pytest.importorskip("usearch")

WORDS = (
    "tent stove lantern river canyon summit glacier meadow forest trail bridge harbor island "
    "desert valley ridge lake storm winter summer compass rope boots jacket map ferry castle "
    "village market bakery library museum garden orchard vineyard mill quarry lighthouse"
).split()


def documents(count: int, seed: int = 3) -> list[Document]:
    rng = random.Random(seed)
    return [
        Document(text=" ".join(rng.choices(WORDS, k=12)), source=f"doc-{seed}-{i}", title="")
        for i in range(count)
    ]


QUERIES = [" ".join(random.Random(q).choices(WORDS, k=4)) for q in range(40)]


@pytest.fixture
def small_threshold(monkeypatch):
    monkeypatch.setattr(ann, "MIN_VECTORS", 100)


def dense_ids(kb: KnowledgeBase, query: str, **options) -> list[str]:
    return [c.id for c in kb.search(query, mode="dense", top_k=10, **options)]


def test_candidates_ranked_exactly_keep_the_exact_results(tmp_path, monkeypatch):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False) as kb:
        kb.add_documents(documents(600))
        exact = {q: dense_ids(kb, q) for q in QUERIES}
        assert kb.store._dense.approximate is None  # below the threshold: the exact scan
    monkeypatch.setattr(ann, "MIN_VECTORS", 100)
    with KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False) as kb:
        found = sum(len(set(dense_ids(kb, q)) & set(exact[q])) for q in QUERIES)
        assert kb.store._dense.approximate is not None
        assert found / (10 * len(QUERIES)) >= 0.98
        scores = [c.score for c in kb.search(QUERIES[0], mode="dense", top_k=10)]
        assert scores == sorted(scores, reverse=True)  # exact scores, in order


def test_the_graph_is_saved_and_mapped_by_the_next_store(tmp_path, small_threshold, monkeypatch):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False) as kb:
        kb.add_documents(documents(300))
        first = {q: dense_ids(kb, q) for q in QUERIES[:10]}
    saved = list(tmp_path.glob("kb.sqlite-ann-*.usearch"))
    assert len(saved) == 1

    def no_build(columns):
        raise AssertionError("the saved graph should have been mapped")

    monkeypatch.setattr(ann.ApproximateIndex, "build", staticmethod(no_build))
    with KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False) as again:
        assert {q: dense_ids(again, q) for q in QUERIES[:10]} == first
        assert again.store._dense.approximate.mapped


def test_appended_chunks_extend_the_graph_and_changed_ones_rebuild_it(
    tmp_path, small_threshold, monkeypatch
):
    path = tmp_path / "kb.sqlite"
    kb = KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False)
    kb.add_documents(documents(300))
    dense_ids(kb, "tent")
    assert kb.store._dense.approximate.mapped  # the built graph, saved and mapped
    builds = []
    original = ann.ApproximateIndex.build
    monkeypatch.setattr(
        ann.ApproximateIndex, "build", staticmethod(lambda c: builds.append(1) or original(c))
    )
    kb.add_documents([Document(text="zeppelin hangar blimp", source="new", title="")])
    assert kb.search("zeppelin hangar blimp", mode="dense", top_k=1)[0].source == "new"
    extended = kb.store._dense.approximate  # saved, then searched from its saved file
    assert len(extended) == 301
    assert extended.mapped
    assert not builds
    kb.delete("doc-3-5")  # not an append: built again, and the old graph file removed
    assert "doc-3-5" not in {c.source for c in kb.search("tent", mode="dense", top_k=300)}
    assert builds == [1]
    assert len(list(tmp_path.glob("kb.sqlite-ann-*.usearch"))) == 1
    kb.close()


def test_scoped_searches_scan_exactly(tmp_path, small_threshold):
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64), link_titles=False)
    kb.add_documents(documents(300))
    kb.add_documents(documents(5, seed=7), collection="other")
    hits = kb.search("tent river", mode="dense", top_k=10, collection="other")
    assert len(hits) == 5
    assert {c.metadata["collection"] for c in hits} == {"other"}
    kb.close()


def test_without_usearch_the_scan_stays_exact(tmp_path, small_threshold, monkeypatch):
    monkeypatch.setattr(ann, "available", lambda: False)
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64), link_titles=False)
    kb.add_documents(documents(300))
    assert dense_ids(kb, "tent")
    assert kb.store._dense.approximate is None
    assert not list(tmp_path.glob("*.usearch"))
    kb.close()


def test_onnx_runtime_still_loads_after_usearch():
    """usearch 2.26 crashed a process that imported onnxruntime after it (pyproject pins
    below it): a knowledge base searched approximately, then asked to embed with MiniLM."""
    script = "import usearch.index, onnxruntime; print('ok')"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, "ok")

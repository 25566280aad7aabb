"""Approximate dense search (ragloop.kb.index.ann) in the SQLite store, with the size threshold
lowered so a small knowledge base uses it: candidates from the HNSW graph ranked by exact scores,
the graph built by the ingest (with progress) and saved beside the file, mapped by the next
store and process, extended by later writes, built again when deleted chunks crowd it, never used
for scoped searches."""

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


def forbid_builds(monkeypatch):
    def no_build(*args, **kwargs):
        raise AssertionError("the graph should have been mapped or extended, not built")

    monkeypatch.setattr(ann.ApproximateIndex, "build", staticmethod(no_build))


def count_builds(monkeypatch) -> list[int]:
    builds: list[int] = []
    original = ann.ApproximateIndex.build

    def counted(pks, columns, on_progress=None):
        builds.append(len(pks))
        return original(pks, columns, on_progress)

    monkeypatch.setattr(ann.ApproximateIndex, "build", staticmethod(counted))
    return builds


def graphs(folder) -> list:
    return sorted(folder.glob("kb.sqlite-hnsw-*.usearch"))


def test_the_ingest_builds_the_graph_with_progress_and_the_next_store_maps_it(
    tmp_path, small_threshold, monkeypatch
):
    path = tmp_path / "kb.sqlite"
    seen = []
    with KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False) as kb:
        kb.add_documents(documents(300), on_progress=seen.append)
    # built by the ingest, before any search, and told as it went
    assert len(graphs(tmp_path)) == 1
    indexing = [s for s in seen if s.phase == "indexing"]
    assert indexing[-1].vectors_to_index == 300
    assert indexing[-1].vectors_indexed == 300
    assert [s.phase for s in seen][-1] == "done"
    forbid_builds(monkeypatch)
    with KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False) as again:
        first = {q: dense_ids(again, q) for q in QUERIES[:10]}
        assert again.store._dense.approximate.mapped
    # another process maps it too, and finds the same
    script = (
        "import json, sys\n"
        "from ragloop.kb.index import ann\n"
        "from ragloop.kb.knowledge_base import KnowledgeBase\n"
        "from ragloop.testing import HashEmbedder\n"
        "ann.MIN_VECTORS = 100\n"
        "ann.ApproximateIndex.build = None  # a build would fail\n"
        "kb = KnowledgeBase(sys.argv[1], embedder=HashEmbedder(64))\n"
        "queries = json.loads(sys.argv[2])\n"
        "found = {q: [c.id for c in kb.search(q, mode='dense', top_k=10)] for q in queries}\n"
        "assert kb.store._dense.approximate.mapped\n"
        "print(json.dumps(found))\n"
    )
    import json

    done = subprocess.run(
        [sys.executable, "-c", script, str(path), json.dumps(QUERIES[:10])],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == first


def test_embed_builds_the_graph_of_vectors_added_later(tmp_path, small_threshold):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False) as kb:
        kb.add_documents(documents(300), vectors="later")
        assert not graphs(tmp_path)  # no vectors yet: nothing to build
        seen = []
        assert kb.embed(on_progress=seen.append) == 300
        assert len(graphs(tmp_path)) == 1
        assert any(s.phase == "indexing" and s.vectors_indexed == 300 for s in seen)


def test_a_new_store_extends_the_saved_graph_with_appended_and_replaced_chunks(
    tmp_path, small_threshold, monkeypatch
):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False) as kb:
        kb.add_documents(documents(300))
    forbid_builds(monkeypatch)
    with KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False) as kb:
        seen = []
        kb.add_documents(
            [Document(text="zeppelin hangar blimp", source="new", title="")],
            on_progress=seen.append,
        )
        assert [s.vectors_to_index for s in seen if s.phase == "indexing"][-1] == 1
        # a changed document: its old vector stays in the graph as a waypoint, never a hit
        kb.add_documents([Document(text="airship mooring mast", source="doc-3-5", title="")])
        graph = kb.store._dense.approximate
        assert graph.mapped
        assert len(graph) == 302
        assert kb.search("zeppelin hangar blimp", mode="dense", top_k=1)[0].source == "new"
        hits = kb.search("airship mooring mast", mode="dense", top_k=400)
        assert hits[0].source == "doc-3-5"
        assert hits[0].content == "airship mooring mast"
        # the graph holds every chunk stored; a search returns none twice and no deleted one
        dense = kb.store._dense
        assert not graph.missing(dense.rows.pks).size
        assert len(dense.rows.pks) == 301
        assert [c.source for c in hits].count("doc-3-5") == 1
        assert len({c.id for c in hits}) == len(hits)
    assert len(graphs(tmp_path)) == 1


def test_the_graph_is_built_again_when_deleted_chunks_would_crowd_it(
    tmp_path, small_threshold, monkeypatch
):
    path = tmp_path / "kb.sqlite"
    kb = KnowledgeBase(path, embedder=HashEmbedder(64), link_titles=False)
    kb.add_documents(documents(400))
    builds = count_builds(monkeypatch)
    for i in range(60):  # 15%: kept as waypoints
        kb.delete(f"doc-3-{i}")
    kb.search("tent", mode="dense")
    assert builds == []
    assert len(kb.store._dense.approximate) == 400
    for i in range(60, 120):  # 30% deleted: the graph is built again
        kb.delete(f"doc-3-{i}")
    assert {c.source for c in kb.search("tent river", mode="dense", top_k=300)}.isdisjoint(
        {f"doc-3-{i}" for i in range(120)}
    )
    assert builds == [280]
    assert len(kb.store._dense.approximate) == 280
    kb.close()


def test_row_numbers_are_never_given_twice(tmp_path):
    """The graph keys vectors by row number: a replaced last document must not give its row
    numbers to other text."""
    with KnowledgeBase(tmp_path / "kb.sqlite", link_titles=False) as kb:
        kb.add_documents(documents(3))
        conn = kb.store._conn()
        (before,) = conn.execute("SELECT max(pk) FROM chunks").fetchone()
        kb.add_documents([Document(text="other words", source="doc-3-2", title="")])
        kb.delete("doc-3-1")
        kb.add_documents([Document(text="more words", source="late", title="")])
        pks = [row[0] for row in conn.execute("SELECT pk FROM chunks ORDER BY pk")]
        assert pks[0] == 1
        assert pks[-2:] == [before + 1, before + 2]


def test_graphs_of_earlier_releases_are_not_used_and_are_removed(tmp_path, small_threshold):
    old = tmp_path / "kb.sqlite-ann-300-0badf00d.usearch"  # keyed by position, not row number
    old.write_bytes(b"not a graph of this release")
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64), link_titles=False) as kb:
        kb.add_documents(documents(300))
        assert dense_ids(kb, "tent")
    assert not old.exists()
    assert len(graphs(tmp_path)) == 1


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

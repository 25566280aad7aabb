"""The SQLite store's indexes saved beside the file (ragloop.kb.index.saved_arrays): a new process
maps them instead of rebuilding them, gets the same results, and never reads an index saved for
another state of the file (a write, added vectors, a copy written elsewhere, a damaged file)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ragloop.kb.index import saved_arrays
from ragloop.kb.knowledge_base import Document, KnowledgeBase
from ragloop.kb.stores.sqlite.store import SQLiteStore
from ragloop.testing import HashEmbedder

DOCS = [
    Document(text="The lantern hangs by the tent at the river camp.", source="camp.md"),
    Document(text="Glacier crossings need rope, boots and a compass.", source="glacier.md"),
    Document(text="The bakery in the village sells rye bread at dawn.", source="bakery.md"),
]
QUERIES = ["lantern tent", "rope compass glacier", "rye bread village"]


def results(kb: KnowledgeBase) -> dict[tuple[str, str], list[tuple[str, float]]]:
    return {
        (query, mode): [(c.id, round(c.score, 6)) for c in kb.search(query, mode=mode, top_k=3)]
        for query in QUERIES
        for mode in ("bm25", "dense", "hybrid")
    }


def saved(folder, kind: str) -> list:
    return sorted(folder.glob(f"kb.sqlite-{kind}-*.arrays"))


@pytest.fixture
def kb_path(tmp_path):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=HashEmbedder(64)) as kb:
        kb.add_documents(DOCS)
    return path


def no_rebuild(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the saved index should have been mapped")

    monkeypatch.setattr(SQLiteStore, "_build_keyword", refuse)
    monkeypatch.setattr(SQLiteStore, "_read_dense", refuse)


def test_the_process_that_builds_the_indexes_searches_their_saved_copies(kb_path):
    # the built arrays are freed: the saved pages are the kernel's to drop and read again
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        results(kb)
        assert kb.store._keyword.saved
        assert not kb.store._dense.columns.flags.writeable  # mapped read-only from its file
        assert not kb.store._dense.columns.flags.owndata


def test_a_new_store_maps_the_saved_indexes_and_finds_the_same(kb_path, monkeypatch):
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        first = results(kb)
    assert len(saved(kb_path.parent, "keyword")) == len(saved(kb_path.parent, "dense")) == 1
    no_rebuild(monkeypatch)
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        assert results(kb) == first
        assert kb.store._keyword.saved
        scoped = kb.search("lantern", mode="hybrid", top_k=3, filters={"source": "camp.md"})
        assert [c.source for c in scoped] == ["camp.md"]


def test_a_write_makes_the_next_search_build_and_save_again(kb_path):
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        results(kb)
        before = saved(kb_path.parent, "keyword") + saved(kb_path.parent, "dense")
        kb.add_documents([Document(text="A lighthouse guards the harbor.", source="harbor.md")])
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        assert next(c.source for c in kb.search("lighthouse harbor", mode="bm25")) == "harbor.md"
        assert next(c.source for c in kb.search("lighthouse harbor", mode="dense")) == "harbor.md"
    after = saved(kb_path.parent, "keyword") + saved(kb_path.parent, "dense")
    assert len(after) == 2
    assert not set(after) & set(before)


def test_added_vectors_change_the_dense_index_only(tmp_path):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=HashEmbedder(64)) as kb:
        kb.add_documents(DOCS, vectors="later")
        assert kb.search("lantern", mode="dense") == []
        kb.search("lantern", mode="bm25")
        keyword = saved(tmp_path, "keyword")
        assert keyword
        kb.embed()
    with KnowledgeBase(path, embedder=HashEmbedder(64)) as kb:
        assert kb.search("lantern tent", mode="dense")[0].source == "camp.md"
        kb.search("lantern", mode="bm25")
        assert kb.store._keyword.saved
        assert saved(tmp_path, "keyword") == keyword


def test_an_index_saved_for_another_copy_of_the_file_is_not_read(kb_path, tmp_path):
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        results(kb)  # indexes saved beside kb.sqlite
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(kb_path, elsewhere / "kb.sqlite")
    with KnowledgeBase(elsewhere / "kb.sqlite", embedder=HashEmbedder(64)) as kb:
        kb.add_documents([Document(text="A lighthouse guards the harbor.", source="harbor.md")])
    shutil.copy(elsewhere / "kb.sqlite", kb_path)  # the copy, written since, comes back
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        assert kb.search("lighthouse", mode="bm25")[0].source == "harbor.md"
        assert kb.search("lighthouse harbor", mode="dense")[0].source == "harbor.md"


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "header"])
def test_a_damaged_saved_index_is_ignored_and_built_again(kb_path, damage, caplog):
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        first = results(kb)
    for path in saved(kb_path.parent, "keyword") + saved(kb_path.parent, "dense"):
        data = path.read_bytes()
        damaged = {
            "truncated": data[: len(data) // 2],
            "garbage": b"\x00" * len(data),
            "empty": b"",
            "header": data.replace(b'"shape": [', b'"shape": [9999, '),
        }[damage]
        path.write_bytes(damaged)
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        assert results(kb) == first  # built again from the rows, and saved whole again
        rewritten = saved(kb_path.parent, "keyword") + saved(kb_path.parent, "dense")
        assert len(rewritten) == 2
        assert all(saved_arrays.load(p) for p in rewritten)


def test_saved_arrays_read_back_as_written_and_read_only(tmp_path):
    arrays = {
        "columns": np.arange(12, dtype=np.float32).reshape(3, 4),
        "ids": np.array([5, 7], dtype=np.int64),
        "none": np.zeros(0, dtype=np.int32),
    }
    path = tmp_path / "x.arrays"
    assert saved_arrays.save(path, arrays, {"names": ["a"]})
    loaded, info = saved_arrays.load(path)
    assert info == {"names": ["a"]}
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype
        assert np.array_equal(loaded[name], array)
    with pytest.raises(ValueError, match="read-only"):
        loaded["columns"][0, 0] = 1.0
    assert saved_arrays.load(tmp_path / "missing.arrays") is None


def test_a_folder_that_cannot_take_the_file_keeps_searching(tmp_path, monkeypatch):
    monkeypatch.setattr(saved_arrays, "save", lambda *args: False)
    kb_path = tmp_path / "kb.sqlite"
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        kb.add_documents(DOCS)
        assert kb.search("lantern tent", mode="hybrid")[0].source == "camp.md"
    with KnowledgeBase(kb_path, embedder=HashEmbedder(64)) as kb:
        assert kb.search("lantern tent", mode="hybrid")[0].source == "camp.md"
    assert not saved(kb_path.parent, "keyword")

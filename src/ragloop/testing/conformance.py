"""The conformance suite every knowledge-base store passes (needs pytest).

Subclass :class:`KnowledgeBaseConformance` in a test module and implement ``make_kb`` to
return a :class:`~ragloop.KnowledgeBase` over your store, using the embedder given::

    from ragloop import KnowledgeBase
    from ragloop.testing.conformance import KnowledgeBaseConformance

    class TestMyStore(KnowledgeBaseConformance):
        def make_kb(self, tmp_path, embedder):
            return KnowledgeBase(store=MyStore(...), embedder=embedder)

ragloop's SQLite store, in-memory store and PostgreSQL store all run it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ragloop.core.errors import StoreError
from ragloop.core.protocols import Embedder
from ragloop.core.records import Scope as ScopeRecord
from ragloop.kb.embedding.hash_embedder import HashEmbedder
from ragloop.kb.index.fusion import reciprocal_rank_fusion
from ragloop.kb.knowledge_base import Document, KnowledgeBase
from ragloop.kb.search import SearchMode
from ragloop.kb.stores.base import BatchWrites, ChunkRecord, DocumentRecord

CORPUS = {
    "returns.md": (
        "# Returns policy\n\nCross-border purchases qualify for a full reimbursement within 30 "
        "days of delivery.\n\n## Exceptions\n\nSale items are final sale and cannot be "
        "returned. Shipping costs are not refunded.\n"
    ),
    "shipping.md": (
        "# Shipping\n\nInternational orders ship within 5 business days to 40 countries.\n\n"
        "## Tracking\n\nEvery parcel gets a tracking number by email.\n"
    ),
    "billing.txt": "Invoices are issued monthly. A late payment penalty of 2% applies.\n",
    "camping/tents.md": ("# Tents\n\nThe Ridgeline 2 tent weighs 1.4 kg and sleeps two hikers.\n"),
}


def write_corpus(root: Path, files: dict[str, str] | None = None) -> Path:
    for name, text in (files or CORPUS).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


class KnowledgeBaseConformance:
    """Behaviour every store must show through :class:`~ragloop.KnowledgeBase`."""

    def make_kb(self, tmp_path: Path, embedder: Embedder | None) -> KnowledgeBase:
        raise NotImplementedError

    @pytest.fixture
    def corpus(self, tmp_path: Path) -> Path:
        return write_corpus(tmp_path / "docs")

    @pytest.fixture
    def kb(self, tmp_path: Path, corpus: Path) -> Any:
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        kb.ingest(corpus)
        yield kb
        kb.close()

    # -- ingestion -------------------------------------------------------------------------------
    def test_ingest_reports_what_it_did(self, tmp_path: Path, corpus: Path) -> None:
        (corpus / "picture.png").write_bytes(b"\x89PNG\r\n")
        (corpus / "empty.md").write_text("")
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        report = kb.ingest(corpus)
        assert (report.added, report.updated, report.unchanged) == (4, 0, 0)
        assert report.chunks_added >= 6
        reasons = dict((Path(p).name, r) for p, r in report.skipped)
        assert reasons == {"picture.png": "unsupported file type '.png'", "empty.md": "empty file"}
        kb.close()

    def test_reingest_of_unchanged_files_costs_nothing(
        self, kb: KnowledgeBase, corpus: Path
    ) -> None:
        before = kb.stats()
        report = kb.ingest(corpus)
        assert (report.added, report.updated, report.unchanged, report.chunks_added) == (0, 0, 4, 0)
        after = kb.stats()
        assert (after.documents, after.chunks) == (before.documents, before.chunks)

    def test_a_touched_file_is_read_once_then_known_by_its_new_times(
        self, kb: KnowledgeBase, corpus: Path
    ) -> None:
        os.utime(corpus / "billing.txt", ns=(1, 1))  # same bytes, other times
        stored = {d.source: d for d in kb.store.documents("default")}["billing.txt"]
        kb.ingest(corpus)
        again = {d.source: d for d in kb.store.documents("default")}["billing.txt"]
        assert again.metadata["mtime_ns"] == 1
        assert again.content_hash == stored.content_hash
        times = ("mtime_ns", "ctime_ns")
        assert {k: v for k, v in again.metadata.items() if k not in times} == {
            k: v for k, v in stored.metadata.items() if k not in times
        }

    def test_a_changed_file_replaces_its_chunks(self, kb: KnowledgeBase, corpus: Path) -> None:
        (corpus / "billing.txt").write_text("Invoices are issued quarterly by post.\n")
        report = kb.ingest(corpus)
        assert (report.updated, report.unchanged) == (1, 3)
        assert not kb.search("late payment penalty", mode="bm25")
        assert kb.search("quarterly invoices", mode="bm25")[0].source.endswith("billing.txt")

    def test_sync_removes_documents_whose_files_are_gone(
        self, kb: KnowledgeBase, corpus: Path
    ) -> None:
        os.remove(corpus / "billing.txt")
        assert kb.ingest(corpus).removed == 0  # only when asked
        assert kb.ingest(corpus, sync=True).removed == 1
        assert kb.stats().documents == 3
        assert not kb.search("late payment penalty", mode="bm25")

    def test_sources_are_relative_to_the_folder_ingested(
        self, kb: KnowledgeBase, corpus: Path
    ) -> None:
        hit = kb.search("Ridgeline tent weighs", mode="bm25", top_k=1)[0]
        assert hit.source == "camping/tents.md"
        assert hit.metadata["root"] == str(corpus.resolve())
        assert kb.store.sources("default") == sorted(CORPUS)
        assert [d.source for d in kb.store.documents()] == sorted(CORPUS)

    def test_sync_removes_only_what_left_the_folder_it_walks(
        self, kb: KnowledgeBase, tmp_path: Path, corpus: Path
    ) -> None:
        other = write_corpus(tmp_path / "more", {"kettles.md": "# Kettles\n\nThey boil water.\n"})
        kb.ingest(other)
        os.remove(corpus / "billing.txt")
        assert kb.ingest(corpus, sync=True).removed == 1
        assert kb.store.sources("default") == sorted({*CORPUS, "kettles.md"} - {"billing.txt"})

    def test_text_first_vectors_later(self, tmp_path: Path, corpus: Path) -> None:
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        report = kb.ingest(corpus, vectors="later")
        assert report.vectors_missing == kb.stats().vectors_missing == report.chunks_added
        assert kb.search("Ridgeline tent", mode="bm25")[0].source == "camping/tents.md"
        assert kb.search("Ridgeline tent", mode="dense") == []
        assert kb.search("Ridgeline tent", mode="hybrid")[0].source == "camping/tents.md"
        assert kb.embed() == report.chunks_added
        assert kb.stats().vectors_missing == 0
        assert kb.search("Ridgeline 2 tent weighs", mode="dense")
        assert kb.ingest(corpus).unchanged == 4
        kb.close()

    def test_chunk_ids_are_stable_across_reingest(self, kb: KnowledgeBase, corpus: Path) -> None:
        first = [c.id for c in kb.search("tent weight", mode="bm25")]
        (corpus / "billing.txt").write_text("Changed.\n")
        kb.ingest(corpus)
        assert [c.id for c in kb.search("tent weight", mode="bm25")] == first

    def test_chunks_keep_title_heading_path_and_position(self, kb: KnowledgeBase) -> None:
        chunk = kb.search("sale items final", mode="bm25", top_k=1)[0]
        assert chunk.metadata["title"] == "Returns policy"
        assert chunk.metadata["heading_path"] == ["Returns policy", "Exceptions"]
        assert chunk.metadata["position"] == 1
        assert chunk.metadata["collection"] == "default"
        assert chunk.source.endswith("returns.md")

    def test_a_document_reads_whole_in_its_order(self, kb: KnowledgeBase) -> None:
        from ragloop.kb.stores.base import DocumentChunks

        source = kb.search("sale items final", mode="bm25", top_k=1)[0].source
        found = kb.document_text("default", source)
        assert found is not None
        assert found.version == kb.document_version("default", source)
        assert found.title == "Returns policy"
        assert found.text.startswith("# Returns policy\n\n")
        assert "\n\n## Exceptions\n\n" in found.text
        assert isinstance(kb.store, DocumentChunks)
        chunks = [c.content.strip() for c in kb.store.document_chunks("default", source)]
        assert chunks
        assert all(text in found.text for text in chunks)
        assert found.text.index(chunks[0]) < found.text.index(chunks[-1])
        assert kb.document_text("default", "no/such.md") is None
        assert kb.document_text("elsewhere", source) is None

    def test_add_documents_from_text(self, tmp_path: Path) -> None:
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        report = kb.add_documents(
            [
                Document(
                    text="The Danube flows into the Black Sea.", source="danube", title="Danube"
                ),
                Document(text="", source="blank"),
            ],
            collection="rivers",
        )
        assert report.added == 1
        assert report.skipped == [("blank", "empty document")]
        hit = kb.search("Black Sea", collection="rivers", mode="bm25")[0]
        assert (hit.source, hit.metadata["title"]) == ("danube", "Danube")
        kb.close()

    def test_a_batch_write_says_what_each_document_replaced(self, tmp_path: Path) -> None:
        """What a store had when it wrote, so two ingests of the same files at once do not
        both report every document added (each knows which one wrote it)."""
        kb = self.make_kb(tmp_path, None)
        store = kb.store
        if not isinstance(store, BatchWrites):
            kb.close()
            pytest.skip("the store writes a transaction per document (no BatchWrites)")

        def batch(content_hash: str) -> list[tuple[DocumentRecord, list[ChunkRecord]]]:
            doc = DocumentRecord("notes", "a.md", "A", content_hash)
            text = f"Version {content_hash} of the notes."
            chunk = ChunkRecord(f"a-{content_hash}", 0, text, ["A"], text, content_hash)
            return [(doc, [chunk])]

        assert store.replace_documents(batch("h1"), []) == {("notes", "a.md"): None}
        assert store.replace_documents(batch("h1"), []) == {("notes", "a.md"): "h1"}
        assert store.replace_documents(batch("h2"), []) == {("notes", "a.md"): "h1"}
        assert [d.content_hash for d in store.documents("notes")] == ["h2"]
        kb.close()

    # -- search -----------------------------------------------------------------------------------
    @pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
    def test_search_modes_rank_the_relevant_chunk_first(self, kb: KnowledgeBase, mode: Any) -> None:
        results = kb.search("tent weighs kg sleeps hikers", mode=mode, top_k=3)
        assert results[0].source.endswith("tents.md")
        scores = [c.score for c in results]
        assert all(0.0 <= s <= 1.0 for s in scores)
        assert scores == sorted(scores, reverse=True)

    def test_keyword_search_stems_and_ignores_stopwords(self, kb: KnowledgeBase) -> None:
        hits = kb.search("what is the reimbursements of the purchase", mode="bm25")
        assert hits[0].source.endswith("returns.md")
        assert kb.search("the of and what", mode="bm25") == []

    @pytest.mark.parametrize(
        "query",
        [
            '"unbalanced',
            "NEAR(tent hikers)",
            "tent*",
            "title:tent",
            "-tent",
            "a AND OR NOT",
            "'; DROP TABLE chunks; --",
            "{tent}",
            "tent^2",
        ],
    )
    def test_query_syntax_is_never_interpreted(self, kb: KnowledgeBase, query: str) -> None:
        for mode in ("bm25", "hybrid"):
            for chunk in kb.search(query, mode=mode):
                assert 0.0 <= chunk.score <= 1.0
        assert kb.stats().documents == 4

    def test_top_k_is_respected(self, kb: KnowledgeBase) -> None:
        for mode in ("bm25", "dense", "hybrid"):
            assert len(kb.search("orders parcel tent invoices", mode=mode, top_k=2)) <= 2

    def test_hybrid_keeps_each_signals_score(self, kb: KnowledgeBase) -> None:
        top = kb.search("international orders ship", mode="hybrid", top_k=1)[0]
        scores = top.metadata["scores"]
        assert {"bm25", "dense", "rrf", "bm25_rank", "dense_rank"} <= set(scores)
        assert top.score == pytest.approx(scores["rrf"])

    def test_a_chunk_holding_an_exact_term_ranks_first_in_hybrid(self, tmp_path: Path) -> None:
        kb = self.make_kb(tmp_path, _TopicEmbedder())
        kb.add_documents(
            [
                Document(text=f"Retry limit {n} for the pool.", source=f"r{n}")
                for n in range(100, 130)
            ]
            + [Document(text=f"Unrelated note {n}.", source=f"n{n}") for n in range(200, 569)]
            + [Document(text="The option word399_7 caps the attempts.", source="target")]
        )
        query = "word399_7 retry limit"
        bm25 = kb.search(query, mode="bm25", top_k=40)
        dense = kb.search(query, mode="dense", top_k=40)
        assert bm25[0].source == "target"
        assert "target" not in {c.source for c in dense}  # dense search never sees it
        fused = reciprocal_rank_fusion({"bm25": bm25, "dense": dense}, top_k=5)
        assert fused[0].source != "target"  # plain fusion lets a look-alike win
        hits = kb.search(query, mode="hybrid", top_k=5)
        assert hits[0].source == "target"
        assert hits[0].metadata["scores"]["exact"] == 1
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        kb.close()

    def test_collections_scope_every_mode(self, tmp_path: Path, corpus: Path) -> None:
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        kb.ingest(corpus / "camping", collection="gear")
        kb.ingest(corpus / "shipping.md", collection="policies")
        for mode in ("bm25", "dense", "hybrid"):
            assert {c.metadata["collection"] for c in kb.search("tent shipping", mode=mode)} == {
                "gear",
                "policies",
            }
            assert all(
                c.metadata["collection"] == "gear"
                for c in kb.search("tent shipping", mode=mode, collection="gear")
            )
            assert kb.search("tent shipping", mode=mode, collection=["policies"])
            assert kb.search("tent shipping", mode=mode, collection=[]) == []
            assert kb.search("tent shipping", mode=mode, collection="nope") == []
        assert [(c.name, c.documents) for c in kb.collections()] == [("gear", 1), ("policies", 1)]
        kb.close()

    def test_scoped_scores_tell_nothing_of_other_collections(self, tmp_path: Path) -> None:
        """A search scoped to some collections takes BM25's statistics (chunk count, document
        frequencies, average length) from those collections alone: a document added to or
        removed from another one moves none of its scores, whether it holds the query's words
        or a word no collection has. Otherwise a caller limited to ``public`` reads from
        ``scores.bm25`` whether ``secret`` says "Acme" (the query's normalisation counted the
        idf of every word some collection holds). With every other collection emptied, the
        unscoped scores are the scoped ones."""
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        kb.add_documents(_SCOPED_PUBLIC, collection="public")
        kb.add_documents(_SCOPED_SECRET, collection="secret")
        query, scope = "Acme Sinister film", ScopeRecord.of("public")

        def scored(collection: str | None = "public") -> list[Any]:
            """Each chunk's id and scores: bm25 and hybrid searches, the store's own."""
            found = [
                kb.search(query, mode=mode, top_k=10, collection=collection)
                for mode in _SCOPED_MODES
            ]
            store_scope = scope if collection else ScopeRecord()
            found.append(kb.store.keyword_search(query, 10, store_scope))
            return [[(c.id, c.score, c.metadata["scores"]) for c in hits] for hits in found]

        before = scored()
        assert [len(hits) for hits in before] == [3, 4, 3]  # hybrid: the dense hits too
        for text in _SCOPED_OTHER_TEXTS:
            kb.add_documents([Document(text=text, source="leak.md")], collection="secret")
            assert scored() == before, text
            assert kb.delete("leak.md", collection="secret") == 1
            assert scored() == before, text
        for source in {d.source for d in _SCOPED_SECRET}:
            kb.delete(source, collection="secret")
        alone = scored(collection=None)[0]
        assert [c for c, _, _ in alone] == [c for c, _, _ in before[0]]
        assert [s for _, s, _ in alone] == pytest.approx([s for _, s, _ in before[0]], rel=1e-5)
        kb.close()

    def test_metadata_filters(self, kb: KnowledgeBase) -> None:
        for mode in ("bm25", "dense", "hybrid"):
            hits = kb.search("orders returns", mode=mode, filters={"format": "md"})
            assert hits
            assert all(c.metadata["format"] == "md" for c in hits)
            hits = kb.search("invoices", mode=mode, filters={"format": ["txt"]})
            assert all(c.source.endswith("billing.txt") for c in hits)
            assert kb.search("invoices", mode=mode, filters={"title": "No such title"}) == []

    def test_delete_removes_a_document_everywhere(self, kb: KnowledgeBase, corpus: Path) -> None:
        assert kb.delete(corpus / "billing.txt") == 1
        assert kb.delete(corpus / "billing.txt") == 0
        for mode in ("bm25", "dense", "hybrid"):
            assert all(
                not c.source.endswith("billing.txt") for c in kb.search("invoices", mode=mode)
            )

    def test_stats(self, kb: KnowledgeBase) -> None:
        stats = kb.stats()
        assert stats.documents == 4
        assert stats.chunks >= 6
        assert (stats.embedding_model, stats.dimension, stats.dense) == ("hash-128", 128, True)

    def test_the_embedding_model_cannot_change(self, tmp_path: Path, corpus: Path) -> None:
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        kb.ingest(corpus)
        with pytest.raises(StoreError, match="cannot mix"):
            kb.store.set_embedding_model("other-model", 64)
        kb.close()

    def test_links_follow_titles_across_documents(self, kb: KnowledgeBase) -> None:
        returns = kb.search("sale items final shipping costs", mode="bm25", top_k=1)[0]
        linked = kb.linked_chunks([returns.id])
        assert [c.metadata["title"] for c in linked] == ["Shipping"]
        assert linked[0].metadata["mention"] == "Shipping"
        assert linked[0].metadata["linked_from"] == returns.id

    def test_links_do_not_depend_on_ingest_order(self, tmp_path: Path) -> None:
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        kb.add_documents(
            [
                Document(
                    text="Ridgeline tents are made by Northfold Gear.",
                    source="a",
                    title="Ridgeline",
                )
            ]
        )
        kb.add_documents([Document(text="A company in Oslo.", source="b", title="Northfold Gear")])
        first = kb.search("Ridgeline tents", mode="bm25", top_k=1)[0]
        assert [c.metadata["title"] for c in kb.linked_chunks([first.id])] == ["Northfold Gear"]
        kb.close()

    def test_an_identifier_is_mentioned_only_as_itself(self, tmp_path: Path) -> None:
        """A name written as an identifier ("RETURN_VALUE") is one word: prose that uses its
        parts ("the return value") does not mention it, the identifier does."""
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        kb.add_documents(
            [
                Document(text="Pops the stack top.", source="a", title="RETURN_VALUE"),
                Document(text="Check the return value of the call.", source="b", title="Calls"),
                Document(text="The opcode RETURN_VALUE ends a frame.", source="c", title="Frames"),
            ]
        )

        def linked_titles(query: str) -> list[str]:
            first = kb.search(query, mode="bm25", top_k=1)[0]
            return [c.metadata["title"] for c in kb.linked_chunks([first.id])]

        assert linked_titles("check call") == []
        assert linked_titles("opcode ends frame") == ["RETURN_VALUE"]
        kb.close()

    def test_links_within_one_batch_go_both_ways(self, tmp_path: Path) -> None:
        """Documents ingested together are written in one transaction: each one's mentions of
        the others' titles are linked, in both directions, as if ingested one at a time."""
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        kb.add_documents(
            [
                Document(text="Ridgeline tents by Northgear.", source="a", title="Ridgeline"),
                Document(text="Northgear makes the Ridgeline.", source="b", title="Northgear"),
                Document(text="Tents are sold in Oslo.", source="c", title="Oslo"),
                Document(text="Oslo stocks the Ridgeline.", source="c", title="Oslo"),
            ]
        )

        def linked_titles(query: str) -> list[str]:
            first = kb.search(query, mode="bm25", top_k=1)[0]
            return sorted(c.metadata["title"] for c in kb.linked_chunks([first.id]))

        assert linked_titles("Ridgeline tents") == ["Northgear"]
        assert linked_titles("makes") == ["Ridgeline"]
        assert linked_titles("stocks") == ["Ridgeline"]  # the second text of source c stands
        assert kb.stats().documents == 3
        kb.close()

    def test_links_are_scoped_to_collections_in_the_store_query(self, tmp_path: Path) -> None:
        """A caller limited to some collections gets only the links whose target is in them,
        from the store's own query: another collection's document named in the text never
        shows, nor uses up the limit."""
        kb = self.make_kb(tmp_path, HashEmbedder(128))
        kb.add_documents(
            [Document(text="A company.", source="n", title="Northgear")], collection="private"
        )
        kb.add_documents(
            [
                Document(
                    text="Ridgeline tents by Northgear, sold in Oslo.",
                    source="r",
                    title="Ridgeline",
                ),
                Document(text="A city.", source="o", title="Oslo"),
            ],
            collection="public",
        )
        first = kb.search("Ridgeline tents", mode="bm25", top_k=1, collection="public")[0]
        every = kb.store.links_from([first.id])
        assert sorted(link.mention for link in every) == ["Northgear", "Oslo"]
        assert [link.mention for link in kb.store.links_from([first.id], ["public"])] == ["Oslo"]
        assert kb.store.links_from([first.id], []) == []
        linked = kb.linked_chunks([first.id], limit=1, collection="public")
        assert [c.metadata["title"] for c in linked] == ["Oslo"]
        assert kb.linked_chunks([first.id], collection="private") == kb.linked_chunks(
            [first.id], collection=["private"]
        )
        kb.close()


# the scoped-statistics test's corpus: the public collection, the secret one, and the texts a
# document of the secret collection comes and goes with (the query's words; a word no
# collection holds)
_SCOPED_PUBLIC = [
    Document(text="A film critic finds a box of home movies.", source="sinister.md",
             title="Sinister"),
    Document(text="Sinister is a 2012 supernatural horror film.", source="horror.md",
             title="Horror"),
    Document(text="The film festival opens on Friday.", source="festival.md"),
    Document(text="Tents and stoves for the trail.", source="gear.md"),
]  # fmt: skip
_SCOPED_MODES: tuple[SearchMode, ...] = ("bm25", "hybrid")
_SCOPED_SECRET = [Document(text="Launch plans for the spring.", source="plans.md")]
_SCOPED_OTHER_TEXTS = (
    "Acme", "Acme Sinister film, the Acme film of Acme.", "Zqxvort", "Zqxvort " * 400,
)  # fmt: skip


class _TopicEmbedder:
    """Vectors by topic: texts about retries point one way, options another, any other text a
    third (a touch of its characters keeps texts apart), so a query about retries finds the
    retry notes first and an option last."""

    model_id = "topic-4"
    dimension = 4

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            jitter = (sum(map(ord, text)) % 97) / 1000
            if "retry" in text.lower():
                out.append([1.0, jitter, 0.0, 0.0])
            elif "option" in text.lower():
                out.append([0.0, 0.0, 1.0, jitter])
            else:
                out.append([jitter, 1.0, 0.0, 0.0])
        return out

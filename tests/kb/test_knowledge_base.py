"""Knowledge-base behaviour beyond the conformance suite: bad input, crashes, embedders, caches."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from ragloop.kb.knowledge_base import (
    DenseSearchUnavailable,
    Document,
    KnowledgeBase,
    KnowledgeBaseNotFound,
)
from ragloop.kb.stores.base import StoreError
from ragloop.kb.stores.sqlite.store import MIGRATIONS, SQLiteStore
from ragloop.testing import HashEmbedder
from ragloop.testing.conformance import write_corpus


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.embedded: list[str] = []

    def embed(self, texts):
        self.embedded.extend(texts)
        return super().embed(texts)


@pytest.fixture
def docs(tmp_path):
    return write_corpus(tmp_path / "docs")


def reasons(report):
    return {Path(p).name: r for p, r in report.skipped}


def test_bad_files_are_skipped_with_reasons_and_the_batch_goes_on(tmp_path, docs):
    (docs / "binary.txt").write_bytes(b"abc\x00\x01\x02" * 10)
    (docs / "controls.txt").write_text("\x01\x02\x03\x04\x05\x06\x07\x08" * 20)
    (docs / "empty.md").write_text("")
    (docs / "blank.md").write_text("\n\n   \n")
    (docs / "big.txt").write_text("word " * 400)
    (docs / "latin.txt").write_bytes("Caf\xe9 cr\xe8me \x80 price".encode("latin-1"))
    (docs / "broken.json").write_text("{not json")
    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\n\nOutside the root.\n")
    (docs / "link.md").symlink_to(outside)
    (docs / "dangling.md").symlink_to(tmp_path / "missing.md")
    (docs / ".hidden.md").write_text("# Hidden\n\nnot ingested\n")
    (docs / ".git").mkdir()
    (docs / ".git" / "config.md").write_text("# VCS\n\nnot ingested\n")
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None, max_file_bytes=1000)
    report = kb.ingest([docs, tmp_path / "nowhere"])
    assert reasons(report) == {
        "binary.txt": "binary file (contains NUL bytes)",
        "controls.txt": "binary file (mostly control characters)",
        "empty.md": "empty file",
        "blank.md": "no text found",
        "big.txt": "file is 0.0 MB, over the 0.0 MB limit (max_file_bytes)",
        "broken.json": "invalid JSON at line 1: Expecting property name enclosed in double quotes",
        "link.md": f"symlink points outside {docs.resolve()}",
        "dangling.md": f"symlink points outside {docs.resolve()}",
        "nowhere": "no such file or directory",
    }
    assert report.added == 5  # the corpus plus latin.txt
    latin = kb.search("cafe creme price", mode="bm25")[0]
    assert latin.metadata["encoding"] == "cp1252"
    assert "Café crème €" in latin.content
    assert kb.search("Secret outside", mode="bm25") == []
    assert kb.search("not ingested", mode="bm25") == []
    kb.close()


def test_undecodable_text_lists_the_encodings_tried(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok \x81\x8d\x8f\x90 text")  # invalid in utf-8 and undefined in cp1252
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    assert reasons(kb.ingest(bad)) == {"bad.txt": "cannot decode the text (tried utf-8, cp1252)"}
    kb = KnowledgeBase(tmp_path / "kb2.sqlite", embedder=None, encodings=["cp1252", "latin-1"])
    assert kb.ingest(bad).added == 1


def test_unreadable_files_are_skipped(tmp_path, docs, monkeypatch):
    # tests run as root, for whom file modes do not apply: simulate the OS refusing the read
    import builtins

    from ragloop.kb.ingest import discover as ingest

    target = docs / "billing.txt"

    def refusing_open(path, *args, **kwargs):
        if Path(path) == target:
            raise PermissionError(13, "Permission denied")
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(ingest, "open", refusing_open, raising=False)
    report = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None).ingest(docs)
    assert reasons(report) == {"billing.txt": "permission denied"}
    assert report.added == 3


def test_utf16_with_bom_and_utf8_bom_are_decoded(tmp_path):
    (tmp_path / "a.txt").write_bytes("tent ranking".encode("utf-16"))
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbfstove guide")
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    assert kb.ingest([tmp_path / "a.txt", tmp_path / "b.txt"]).added == 2
    assert kb.search("tent", mode="bm25")[0].metadata["encoding"] == "utf-16"
    assert kb.search("stove", mode="bm25")[0].metadata["encoding"] == "utf-8-sig"


def test_embeddings_are_cached_by_model_and_text(tmp_path, docs):
    embedder = CountingEmbedder()
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=embedder)
    kb.ingest(docs)
    first = len(embedder.embedded)
    kb.ingest(docs, collection="copy")  # same texts, other collection: nothing to embed
    assert len(embedder.embedded) == first
    (docs / "billing.txt").write_text("Invoices are issued monthly.\n\nNew paragraph.\n")
    kb.ingest(docs)
    assert embedder.embedded[first:] == ["billing\nInvoices are issued monthly.\n\nNew paragraph."]
    kb.search("tents", mode="dense")
    kb.search("  TENTS ", mode="dense")  # the same query once normalised: cached in memory
    assert embedder.embedded[first + 1 :] == ["tents"]
    kb.close()
    reopened = KnowledgeBase(tmp_path / "kb.sqlite", embedder=embedder)
    reopened.search("tents", mode="hybrid")  # a search never writes: the file has no query cache
    assert embedder.embedded[first + 2 :] == ["tents"]


def test_a_knowledge_base_refuses_another_embedding_model(tmp_path, docs):
    KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64)).ingest(docs)
    with pytest.raises(StoreError, match="cannot mix in hash-32"):
        KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(32))
    kb = KnowledgeBase(tmp_path / "kb.sqlite")  # "default": the recorded model
    assert kb.embedder is not None
    assert kb.embedder.model_id == "hash-64"


def test_without_an_embedder_bm25_works_and_dense_says_why(tmp_path, docs, caplog):
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    kb.ingest(docs)
    assert kb.search("tent", mode="bm25")
    with pytest.raises(DenseSearchUnavailable, match="embedder=None"):
        kb.search("tent", mode="dense")
    with caplog.at_level(logging.WARNING, logger="ragloop"):
        assert kb.search("tent", mode="hybrid")[0].source.endswith("tents.md")
    assert "bm25 only" in caplog.text
    assert kb.stats().dense is False


def test_vectors_of_an_unknown_model_turn_dense_off_with_the_reason(tmp_path, docs):
    store = SQLiteStore(tmp_path / "kb.sqlite")
    store.set_embedding_model("some-remote-model", 8)
    store.close()
    kb = KnowledgeBase(tmp_path / "kb.sqlite")
    assert kb.embedder is None
    assert "some-remote-model" in kb.dense_off_reason
    with pytest.raises(StoreError, match="would leave new chunks out of dense search"):
        kb.ingest(docs)


def test_read_commands_never_create_a_missing_knowledge_base(tmp_path):
    with pytest.raises(KnowledgeBaseNotFound, match="ragloop ingest"):
        KnowledgeBase(tmp_path / "missing.sqlite", create=False)
    assert not (tmp_path / "missing.sqlite").exists()


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a usable ragloop knowledge base"):
        KnowledgeBase(junk)


def test_schema_is_migrated_once_and_uses_wal(tmp_path):
    store = SQLiteStore(tmp_path / "kb.sqlite")
    conn = store._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    versions = [(version,) for version, _ in MIGRATIONS]
    assert conn.execute("SELECT version FROM _ragloop_migrations").fetchall() == versions
    store.close()
    again = SQLiteStore(tmp_path / "kb.sqlite")
    count = again._conn().execute("SELECT count(*) FROM _ragloop_migrations").fetchone()[0]
    assert count == len(MIGRATIONS)
    assert again.integrity_check() == "ok"


def test_keyword_terms_are_stemmed_words_without_stopwords():
    from ragloop.kb.index.bm25 import analyze

    assert analyze('the "tents" NEAR(x) OR running*') == ["tent", "near", "x", "run"]
    assert analyze("the of") == []


def test_concurrent_readers_while_ingesting(tmp_path, docs):
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64))
    kb.ingest(docs)
    extra = tmp_path / "more"
    extra.mkdir()
    for i in range(60):
        (extra / f"note{i}.md").write_text(f"# Note {i}\n\nTent care tip number {i}.\n")
    failures: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                for mode in ("bm25", "dense", "hybrid"):
                    assert kb.search("tent care", mode=mode)
            except BaseException as error:
                failures.append(error)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    report = kb.ingest(extra)
    done.set()
    for thread in threads:
        thread.join()
    assert failures == []
    assert report.added == 60


def test_a_killed_ingest_leaves_a_sound_file_and_the_rerun_completes(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(400):
        (corpus / f"doc{i:03}.md").write_text(
            f"# Doc {i}\n\n" + f"Paragraph {i} about tents. " * 40
        )
    db = tmp_path / "kb.sqlite"
    script = textwrap.dedent(
        f"""
        import sys
        from ragloop.kb.ingest import pipeline as ingest_run
        from ragloop.kb.knowledge_base import KnowledgeBase
        ingest_run.WRITE_BATCH = 64  # batches of documents written in one transaction each
        kb = KnowledgeBase({str(db)!r}, embedder="hash")
        def progress(state):
            print(state.phase, state.chunks_stored, flush=True)
        kb.ingest({str(corpus)!r}, on_progress=progress)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            phase, stored = line.split()
            if phase == "reading" and int(stored) >= 300:  # a few batches written, more to
                os.kill(process.pid, signal.SIGKILL)  # come: kill -9, no chance to clean up
                break
    assert process.returncode == -signal.SIGKILL
    store = SQLiteStore(db)
    assert store.integrity_check() == "ok"
    partial = store.stats().documents
    store.close()
    assert 0 < partial < 400
    kb = KnowledgeBase(db, embedder="hash")
    report = kb.ingest(corpus)
    assert report.unchanged == partial
    assert report.added == 400 - partial
    stats = kb.stats()
    assert stats.documents == 400
    ids = kb.store._conn().execute("SELECT count(*), count(DISTINCT id) FROM chunks").fetchone()
    assert ids[0] == ids[1] == stats.chunks


def test_add_documents_markdown_and_metadata(tmp_path):
    kb = KnowledgeBase.in_memory(embedder=None)
    kb.add_documents(
        [
            Document(
                text="# Stoves\n\n## Fuel\n\nGas canisters.",
                source="s",
                format="markdown",
                metadata={"team": "gear"},
            )
        ]
    )
    hit = kb.search("gas canisters", mode="bm25")[0]
    assert hit.metadata["heading_path"] == ["Stoves", "Fuel"]
    assert hit.metadata["team"] == "gear"
    assert kb.search("gas", mode="bm25", filters={"team": "gear"})
    assert kb.search("gas", mode="bm25", filters={"team": "other"}) == []


def test_add_documents_takes_mappings_and_names_a_bad_one(tmp_path):
    kb = KnowledgeBase.in_memory(embedder=None)
    report = kb.add_documents([{"source": "a.md", "text": "Gas canisters fuel the stove."}])
    assert report.added == 1
    assert kb.search("gas canisters", mode="bm25")[0].source == "a.md"
    with pytest.raises(ValidationError, match="text"):
        kb.add_documents([{"source": "b.md"}])
    with pytest.raises(ValidationError, match="Document"):
        kb.add_documents(["just a string"])  # type: ignore[list-item]
    assert [d.source for d in kb.store.documents()] == ["a.md"]


async def test_the_retriever_is_sync_and_async_and_scoped(tmp_path, docs):
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64))
    kb.ingest(docs / "camping", collection="gear")
    kb.ingest(docs / "shipping.md", collection="policies")
    retriever = kb.retriever(collection="gear", mode="bm25")
    assert [c.metadata["collection"] for c in retriever.retrieve("tent shipping")] == ["gear"]
    assert await retriever.aretrieve("tent shipping", top_k=1) == retriever.retrieve(
        "tent shipping", 1
    )
    # the function form used by AgentLoop never widens the retriever's own scope
    assert retriever.search("shipping", limit=5, collection="policies") == []
    assert retriever.search("tent", limit=5, collections=["gear", "policies"])
    open_retriever = kb.retriever(mode="bm25")
    assert open_retriever.search("shipping", limit=5, collection="policies")


def test_search_argument_errors(tmp_path):
    kb = KnowledgeBase.in_memory(embedder=None)
    with pytest.raises(ValueError, match="mode"):
        kb.search("x", mode="fuzzy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k"):
        kb.search("x", top_k=0)
    with pytest.raises(TypeError, match="string"):
        kb.search(None)  # type: ignore[arg-type]


def test_migration_2_backfills_keyword_terms_of_an_older_file(tmp_path):
    conn = sqlite3.connect(tmp_path / "kb.sqlite")  # a file as version 1 of the schema left it
    conn.executescript(MIGRATIONS[0][1])
    conn.execute("CREATE TABLE _ragloop_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    conn.execute("INSERT INTO _ragloop_migrations VALUES (1, 'then')")
    conn.execute(
        "INSERT INTO documents VALUES (1, 'default', 'tents.md', 'Tents', 'h', '{}', 'then')"
    )
    conn.execute(
        "INSERT INTO chunks (pk, id, document_id, position, content, heading_path, text_hash) "
        "VALUES (1, 'c1', 1, 0, 'The Ridgeline tent weighs 1.4 kg.', '[]', 'x')"
    )
    conn.commit()
    conn.close()
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    hits = kb.search("tents weighing", mode="bm25")  # "Tents" only in the title
    assert [c.id for c in hits] == ["c1"]
    conn = kb.store._conn()
    versions = conn.execute("SELECT version FROM _ragloop_migrations")
    assert [v for (v,) in versions] == [version for version, _ in MIGRATIONS]
    # migration 4: the tokens that name the saved indexes
    assert kb.store._meta(conn, "text_state") != kb.store._meta(conn, "vector_state")


def test_migration_3_keeps_the_vectors_of_an_older_file(tmp_path, docs):
    embedder = HashEmbedder(64)
    with KnowledgeBase(tmp_path / "new.sqlite", embedder=embedder) as built:
        built.ingest(docs)
        expected = [c.id for c in built.search("tent weight", mode="dense")]
    old = sqlite3.connect(tmp_path / "kb.sqlite")  # the same contents in a version-2 file
    for _, script in MIGRATIONS[:2]:
        old.executescript(script)
    old.execute("CREATE TABLE _ragloop_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    old.execute("INSERT INTO _ragloop_migrations VALUES (1, 'then'), (2, 'then')")
    old.execute("ATTACH ? AS new", (str(tmp_path / "new.sqlite"),))
    for table in ("documents", "chunks", "vocabulary", "vectors", "meta"):
        old.execute(f"DELETE FROM {table}")
        old.execute(f"INSERT INTO {table} SELECT * FROM new.{table}")
    old.commit()
    old.close()
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=embedder)
    assert [c.id for c in kb.search("tent weight", mode="dense")] == expected
    conn = kb.store._conn()
    table = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'vectors'").fetchone()[0]
    assert "WITHOUT ROWID" not in table
    assert kb.store.integrity_check() == "ok"


def test_searches_survive_documents_replaced_by_another_writer(tmp_path, docs):
    reader = KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64))
    reader.ingest(docs)
    for mode in ("bm25", "dense"):
        reader.search("tent", mode=mode)  # both indexes loaded
    writer = KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64))
    # another connection replaces every document (new rows) after the reader loaded its
    # indexes; the reader's next search must reload, and one racing the load must not crash
    (docs / "camping" / "tents.md").write_text("# Tents\n\nThe Ridgeline 3 tent weighs 2 kg.\n")
    writer.ingest(docs)
    stale_pks = reader.store._keyword.rows.pks.copy()
    assert reader.search("tent weighs", mode="bm25")[0].content.startswith("The Ridgeline 3")
    reader.store._keyword.rows.pks = stale_pks  # as if the load had raced the writer
    reader.store._keyword.generation = reader.store._generation()
    for chunk in reader.search("tent weighs", mode="bm25"):
        assert "Ridgeline 2" not in chunk.content
    writer.close()
    reader.close()


@pytest.mark.parametrize("collection", [None, "handbook", ["handbook", "other"]])
def test_the_sqlite_store_fuses_row_numbers_as_the_generic_fusion_fuses_chunks(
    tmp_path, docs, collection
):
    """The SQLite store's hybrid_search reads only the fused rows; it must return what fusing
    the chunks of its two searches returns: same chunks, order, scores and signals."""
    from ragloop.kb.index.fusion import reciprocal_rank_fusion
    from ragloop.kb.stores.base import Scope

    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64))
    kb.ingest(docs, collection="handbook")
    kb.add_documents(
        [Document(title="Returns abroad", source="abroad.md", text="Returns from abroad.")],
        collection="other",
    )
    scope = Scope.of(collection, None)
    for query in ("returns policy", "tent weight and pegs", "shipping costs abroad"):
        vector = kb.query_vector(query)
        generic = reciprocal_rank_fusion(
            {
                "bm25": kb.store.keyword_search(query, 40, scope),
                "dense": kb.store.vector_search(vector, 40, scope),
            },
            top_k=5,
            k=kb.rrf_k,
        )
        fused = kb.search(query, top_k=5, collection=collection, mode="hybrid")
        assert [(c.id, c.score, c.metadata["scores"]) for c in fused] == [
            (c.id, c.score, c.metadata["scores"]) for c in generic
        ]
        assert fused
    kb.close()


def test_a_file_given_alone_is_named_by_its_file_name(tmp_path, docs):
    other = write_corpus(tmp_path / "other", {"billing.txt": "Invoices by post.\n"})
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=None) as kb:
        assert kb.ingest(docs / "billing.txt").added == 1
        assert kb.store.sources("default") == ["billing.txt"]
        # two files of one name, from two folders, in one run: named from their common folder
        report = kb.ingest([docs / "billing.txt", other / "billing.txt"])
        assert (report.added, report.unchanged, report.skipped) == (1, 1, [])
        assert kb.store.sources("default") == ["billing.txt", "other/billing.txt"]
        assert kb.delete(docs / "billing.txt") == 1  # by the file's path
        assert kb.store.sources("default") == ["other/billing.txt"]


def test_absolute_sources_of_an_older_knowledge_base_become_relative(tmp_path, docs):
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=None) as kb:
        old = str((docs / "billing.txt").resolve())  # how sources were stored before
        kb.add_documents([Document(text="Invoices are issued monthly.", source=old)])
        report = kb.ingest(docs)
        assert (report.added, report.updated) == (3, 1)
        assert kb.store.sources("default") == sorted(
            ["billing.txt", "camping/tents.md", "returns.md", "shipping.md"]
        )


def test_reingest_reads_only_files_whose_size_or_time_changed(tmp_path, docs, monkeypatch):
    from ragloop.kb.ingest import items

    read: list[str] = []
    real_read = items.read_file

    def counting_read(path, **options):
        read.append(path.name)
        return real_read(path, **options)

    monkeypatch.setattr(items, "read_file", counting_read)
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=None) as kb:
        kb.ingest(docs)
        assert sorted(read) == ["billing.txt", "returns.md", "shipping.md", "tents.md"]
        read.clear()
        assert kb.ingest(docs).unchanged == 4
        assert read == []  # size and modification time said enough
        os.utime(docs / "billing.txt", ns=(1, 1))  # touched, same bytes: read, not parsed
        (docs / "returns.md").write_text("# Returns\n\nNo returns after 60 days.\n")
        report = kb.ingest(docs)
        assert sorted(read) == ["billing.txt", "returns.md"]
        assert (report.unchanged, report.updated) == (3, 1)
        read.clear()
        assert kb.ingest(docs).unchanged == 4
        assert read == []  # the touched file's new times were recorded: not read again


def test_an_interrupted_embedding_goes_on_where_it_stopped(tmp_path, docs):
    embedder = CountingEmbedder()
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=embedder) as kb:
        report = kb.ingest(docs, vectors="later")
        assert (report.chunks_embedded, report.vectors_missing) == (0, report.chunks_added)
        assert embedder.embedded == []

        class Interrupted(Exception):
            pass

        def stop_after_first_batch(state):
            if state.phase == "embedding" and state.chunks_embedded:
                raise Interrupted

        from ragloop.kb.ingest import pipeline as ingest_run

        batch, ingest_run.EMBED_BATCH = ingest_run.EMBED_BATCH, 2
        try:
            with pytest.raises(Interrupted):
                kb.embed(on_progress=stop_after_first_batch)
        finally:
            ingest_run.EMBED_BATCH = batch
        assert kb.stats().vectors_missing == report.chunks_added - 2  # the first batch is kept
        embedded = len(embedder.embedded)
        assert kb.embed() == report.chunks_added - 2
        assert len(embedder.embedded) == embedded + report.chunks_added - 2  # nothing twice
        assert kb.stats().vectors_missing == 0
        assert kb.embed() == 0


def test_chunks_written_after_the_last_ones_were_deleted_are_still_embedded(tmp_path):
    # the search for chunks without a vector starts where the last one found none missing;
    # the last chunks' row numbers, once deleted, are not given again (the vector graph keys
    # vectors by row number): a new chunk comes after them, and is found
    embedder = CountingEmbedder()
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=embedder) as kb:
        kb.add_documents(
            [Document(text="Alpha one.", source="a"), Document(text="Beta two.", source="b")]
        )
        assert kb.stats().vectors_missing == 0
        pk_of = (
            "SELECT c.pk FROM chunks c JOIN documents d ON d.id = c.document_id WHERE source = ?"
        )
        conn = kb.store._conn()
        (b_pk,) = conn.execute(pk_of, ("b",)).fetchone()
        assert conn.execute("SELECT pk FROM embedded_below").fetchall() == [(b_pk + 1,)]
        kb.delete("b")
        kb.add_documents([Document(text="Gamma three.", source="c")], vectors="later")
        assert conn.execute(pk_of, ("c",)).fetchone() == (b_pk + 1,)
        assert kb.stats().vectors_missing == 1
        embedder.embedded.clear()
        assert kb.embed() == 1
        assert ["Gamma three." in text for text in embedder.embedded] == [True]
        assert kb.stats().vectors_missing == 0


def test_chunks_written_after_deleted_ones_without_phrases_still_get_their_phrases(tmp_path):
    # the phrase index is written once a phrase is looked up (an ingest with title links);
    # chunks written without it lack their phrases from meta 'phrases_from' on, also once
    # the chunks from it on are deleted and new ones written after them
    path = tmp_path / "kb.sqlite"
    pk_of = "SELECT c.pk FROM chunks c JOIN documents d ON d.id = c.document_id WHERE source = ?"
    with KnowledgeBase(path, embedder=None) as kb:
        kb.add_documents(
            [
                Document(text="Tents and stoves.", source="a", title="Canvas Tents"),
                Document(text="Packing the Canvas Tents.", source="b", title="Packing"),
            ]
        )
        conn = kb.store._conn()
        assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone() == (2,)
        (b_pk,) = conn.execute(pk_of, ("b",)).fetchone()
    with KnowledgeBase(path, embedder=None, link_titles=False) as kb:
        kb.add_documents([Document(text="Rivers to cross.", source="c")])
        conn = kb.store._conn()
        assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone() == (2,)
        kb.delete("b")
        kb.delete("c")
        kb.add_documents([Document(text="Sleeping under the Night Sky.", source="d")])
        assert conn.execute(pk_of, ("d",)).fetchone() == (b_pk + 2,)  # never given twice
        assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone() == (1,)
    with KnowledgeBase(path, embedder=None) as kb:
        kb.add_documents([Document(text="Stars at night.", source="e", title="Night Sky")])
        conn = kb.store._conn()
        assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone() == (3,)
        assert conn.execute("SELECT value FROM meta WHERE key = 'phrases_from'").fetchone() is None
        (d_id,) = conn.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE source = 'd'"
        ).fetchone()
        assert [link.mention for link in kb.store.links_from([d_id])] == ["Night Sky"]


def test_counting_the_chunks_without_vectors_does_not_wait_for_another_writer(tmp_path):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=HashEmbedder(64)) as kb:
        kb.add_documents([Document(text="Alpha one.", source="a")], vectors="later")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("DELETE FROM embedded_below")  # as in a file written before the record
    writer.execute("BEGIN IMMEDIATE")  # another process writing for longer than the timeout
    try:
        with KnowledgeBase(
            store=SQLiteStore(path, timeout_s=0.05), embedder=HashEmbedder(64)
        ) as kb:
            assert kb.stats().vectors_missing == 1  # where it starts is left unrecorded
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    with KnowledgeBase(path, embedder=HashEmbedder(64)) as kb:
        assert kb.stats().vectors_missing == 1
        assert kb.embed() == 1


def test_progress_reports_files_then_chunks_with_rates(tmp_path, docs):
    states = []
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(64)) as kb:
        report = kb.ingest(docs, on_progress=states.append)
    phases = [s.phase for s in states]
    assert phases == sorted(phases, key=["reading", "embedding", "indexing", "done"].index)
    reading = [s for s in states if s.phase == "reading"]
    assert reading[-1].files_done == reading[-1].files_total == 4
    assert reading[-1].chunks_stored == report.chunks_added
    embedding = [s for s in states if s.phase == "embedding"]
    assert embedding[-1].chunks_embedded == embedding[-1].chunks_to_embed == report.chunks_added
    assert all(s.rate > 0 and s.eta_s is not None for s in embedding if s.chunks_embedded)
    assert embedding[-1].eta_s == 0

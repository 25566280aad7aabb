"""The PostgreSQL store beyond the conformance suite, on a real server (``postgres_server``):
concurrent writers, scopes in the SQL, migrations, reconnection, the command line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from ragloop.kb.knowledge_base import Document, KnowledgeBaseNotFound
from ragloop.kb.stores.base import ChunkRecord, DocumentRecord, Scope, StoreError
from ragloop.kb.stores.postgres import postings
from ragloop.kb.stores.postgres.connection import index_probes
from ragloop.kb.stores.postgres.schema import LOCK_BLOCKS, MIGRATIONS
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase, PostgresStore
from ragloop.testing import HashEmbedder
from ragloop.testing.conformance import write_corpus
from ragloop.testing.postgres import TemporaryPostgres, embedded_bin_dir


@pytest.fixture
def dsn(postgres_server):
    return postgres_server.dsn


def sql(dsn, schema, query, params=()):
    with psycopg.connect(dsn, options=f"-c search_path={schema},public") as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def counters_match_the_chunks(dsn, schema):
    """The corpus counters count the chunks, each collection's counters its chunks, and the
    postings blocks hold exactly one entry per (lexeme, chunk) of the chunks stored, with its
    term frequency and chunk length."""
    counted = sql(dsn, schema, "SELECT sum(chunks), sum(terms) FROM corpus_counters")[0]
    actual = sql(dsn, schema, "SELECT count(*), sum(n_terms) FROM chunks")[0]
    per_collection = sql(
        dsn,
        schema,
        "SELECT collection, sum(chunks), sum(terms) FROM collection_counters GROUP BY 1 "
        "HAVING sum(chunks) <> 0 OR sum(terms) <> 0 ORDER BY 1",
    )
    actual_per_collection = sql(
        dsn, schema, "SELECT collection, count(*), sum(n_terms) FROM chunks GROUP BY 1 ORDER BY 1"
    )
    if per_collection != actual_per_collection:
        return False
    expected = sorted(
        sql(
            dsn,
            schema,
            "SELECT t.lexeme, c.collection, c.pk, coalesce(array_length(t.positions, 1), 1), "
            "c.n_terms FROM chunks c, unnest(c.tsv) t",
        )
    )
    held = []
    for lexeme, collection, segment, n, entries in sql(
        dsn, schema, "SELECT lexeme, collection, segment, n, entries FROM postings_blocks"
    ):
        pks, tfs, lengths = postings.decode(bytes(entries), [segment], [n])
        assert n > 0  # an emptied block is dropped
        held += [
            (lexeme, collection, int(pk), int(tf), int(length))
            for pk, tf, length in zip(pks, tfs, lengths, strict=True)
        ]
    return counted == actual and sorted(held) == expected


def docs(prefix, n, words="alpine tent"):
    return [
        Document(text=f"{prefix} {i}: a {words} note number {i}.", source=f"{prefix}-{i}")
        for i in range(n)
    ]


def test_concurrent_writers_on_two_connections(dsn, postgres_schema):
    first = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(64))
    second = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(64))
    errors: list[BaseException] = []

    def write(kb, prefix):
        try:
            kb.add_documents(docs(prefix, 40))
            for _ in range(5):  # both replace the same documents, changed, again and again
                kb.add_documents(docs("shared", 5, words=f"{prefix} {_}"))
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=write, args=(first, "a")),
        threading.Thread(target=write, args=(second, "b")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stats = first.stats()
    assert (stats.documents, stats.chunks) == (85, 85)
    assert counters_match_the_chunks(dsn, postgres_schema)
    assert len(first.search("alpine tent", mode="bm25", top_k=100)) == 80
    assert {c.source for c in second.search("shared note", mode="hybrid", top_k=50)} >= {
        f"shared-{i}" for i in range(5)
    }
    first.close()
    second.close()


WRITER = """
import sys
from ragloop.kb.knowledge_base import Document
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase

dsn, schema, name = sys.argv[1:]
kb = PostgresKnowledgeBase(dsn, schema=schema, embedder=None)
for round in range(6):
    # the writers' batches overlap on shared-10..19 and name them in opposite orders
    numbers = range(20) if name == "a" else reversed(range(10, 30))
    kb.add_documents(
        [
            Document(text=f"Ridge note {i} written by {name} in round {round}.", source=source)
            for i in numbers
            for source in [f"shared-{i}"]
        ]
        + [Document(text=f"Own page of {name}, round {round}.", source=f"{name}-{round}")]
    )
kb.close()
"""


def test_two_processes_replacing_overlapping_batches_end_consistent(dsn, postgres_schema):
    PostgresStore(dsn, schema=postgres_schema).close()  # the schema, before both race for it
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, dsn, postgres_schema, name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for writer in writers:
        _, errors = writer.communicate(timeout=120)
        assert writer.returncode == 0, errors
    assert counters_match_the_chunks(dsn, postgres_schema)
    per_document = sql(
        dsn,
        postgres_schema,
        "SELECT d.source, count(c.pk), min(c.content) FROM documents d "
        "LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.source",
    )
    assert len(per_document) == 30 + 12
    assert {count for _, count, _ in per_document} == {1}  # one version of each, whole
    for source, _, content in per_document:
        if source.startswith("shared-"):
            number = int(source.split("-")[1])
            writer = "a" if number < 10 else "b" if number >= 20 else "[ab]"
            assert re.fullmatch(f"Ridge note {number} written by {writer} in round 5.", content)
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    assert len(kb.search("ridge note", mode="bm25", top_k=100)) == 30
    kb.close()


def test_sources_are_locked_in_one_order_whatever_the_batch_order(dsn, postgres_schema):
    """Two writers of overlapping batches cannot wait for each other in a circle: a batch
    blocked on one source holds the locks of the sources before it in key order only."""
    store = PostgresStore(dsn, schema=postgres_schema)
    sources = [f"s-{i}" for i in range(12)]
    keys = dict(
        sql(dsn, "public", "SELECT s, hashtextextended(s, 0) FROM unnest(%s::text[]) s", (sources,))
    )
    held = sorted(sources, key=keys.__getitem__)[5]  # another writer holds this one
    batch = [
        (DocumentRecord("default", source, "", f"hash-{source}"), [])
        for source in reversed(sources)
    ]
    with psycopg.connect(dsn) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (keys[held],))
        writer = threading.Thread(target=store.replace_documents, args=(batch, []))
        writer.start()
        locks: list[tuple[int, bool]] = []
        for _ in range(200):
            locks = sql(
                dsn,
                "public",
                "SELECT (classid::bigint << 32) | objid::bigint, granted FROM pg_locks "
                "WHERE locktype = 'advisory' AND pid <> %s",
                (other.info.backend_pid,),
            )
            if any(not granted for _, granted in locks):
                break
            time.sleep(0.02)
        other.commit()  # lets the writer on
    writer.join()
    below = {keys[s] for s in sources if keys[s] < keys[held]}
    assert {key for key, granted in locks if granted} == below
    assert [key for key, granted in locks if not granted] == [keys[held]]
    assert [d.source for d in store.documents()] == sorted(sources)
    store.close()


def test_a_batch_naming_a_source_twice_stores_its_last_version(dsn, postgres_schema):
    def version(text, source="a.md"):
        chunk = ChunkRecord(f"{source}:{text}", 0, text, [], text, f"hash:{text}")
        return DocumentRecord("default", source, "", f"doc:{text}"), [chunk]

    store = PostgresStore(dsn, schema=postgres_schema)
    store.replace_documents([version("stored first"), version("other", "b.md")], [])
    store.replace_documents([version("draft"), version("final"), version("other 2", "b.md")], [])
    assert {d.source: d.content_hash for d in store.documents()} == {
        "a.md": "doc:final",
        "b.md": "doc:other 2",
    }
    found = store.get_chunks(["a.md:stored first", "a.md:draft", "a.md:final", "b.md:other"])
    assert [c.content for c in found] == ["final"]
    assert store.chunks_with_phrase("stored first", 5) == []
    assert store.keyword_search("draft", 5, Scope()) == []
    assert counters_match_the_chunks(dsn, postgres_schema)
    store.close()


def test_a_batch_leaves_no_tsvector_pending_unless_the_writer_does_not_own_the_index(
    dsn, postgres_schema
):
    flush = "SELECT gin_clean_pending_list('chunks_tsv'::regclass)"
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    kb.add_documents(docs("p", 5))
    kb.close()
    assert sql(dsn, postgres_schema, flush) == [(0,)]  # flushed by the batch already
    role = f"w_{postgres_schema}"  # a role granted the tables, owning none of them
    for statement in (
        f'CREATE ROLE "{role}" LOGIN',
        f'GRANT USAGE ON SCHEMA "{postgres_schema}" TO "{role}"',
        f'GRANT ALL ON ALL TABLES IN SCHEMA "{postgres_schema}" TO "{role}"',
        f'GRANT ALL ON ALL SEQUENCES IN SCHEMA "{postgres_schema}" TO "{role}"',
    ):
        sql(dsn, "public", statement)
    kb = PostgresKnowledgeBase(
        dsn.replace("postgres@", f"{role}@"), schema=postgres_schema, embedder=None
    )
    kb.add_documents(docs("q", 3))
    assert len(kb.search("alpine tent", mode="bm25", top_k=10)) == 8
    kb.close()
    assert sql(dsn, postgres_schema, flush)[0][0] > 0  # its entries waited in the list
    assert counters_match_the_chunks(dsn, postgres_schema)


def test_the_postings_of_replaced_documents_are_found_by_their_primary_key(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    kb.add_documents(docs("x", 300))
    store = kb.store
    with store._pool.connection() as conn, conn.transaction(force_rollback=True):
        blocks = conn.execute("SELECT lexeme, collection, segment FROM postings_blocks")
        keys = [list(column) for column in zip(*blocks, strict=True)]
        with index_probes(conn):  # unguided, the planner may hash every block here
            plan = [row[0] for row in conn.execute(f"EXPLAIN {LOCK_BLOCKS}", keys)]
        after = conn.execute("SELECT current_setting('enable_hashjoin')").fetchone()
    assert any("postings_blocks_pkey on postings_blocks" in line for line in plan)
    assert not any("Seq Scan on postings_blocks" in line for line in plan)
    assert after == ("on",)
    kb.add_documents(docs("x", 300, words="glacier lake"))  # all replaced
    assert len(kb.search("glacier lake", mode="bm25", top_k=500)) == 300
    assert kb.search("alpine tent", mode="bm25") == []
    assert counters_match_the_chunks(dsn, postgres_schema)
    kb.close()


def sections(name, lake="A quiet glacier lake below the pass."):
    return Document(
        text=f"# {name}\n\n## Ridge\n\nThe ridge trail of {name} climbs through larch "
        f"forest.\n\n## Lake\n\n{lake}\n\n## Hut\n\nThe hut of {name} sleeps twelve.",
        source=f"{name}.md",
        format="markdown",
    )


def test_a_batch_of_new_and_changed_documents_equals_writing_them_one_at_a_time(
    dsn, postgres_schema
):
    first = [sections(name) for name in ("Alder", "Birch", "Cedar", "Dogwood", "Elm")]
    second = [  # changed (one section each, the others' vectors come from the cache), new,
        # unchanged, and one source given twice
        sections("Birch", lake="Birch lake froze early this autumn."),
        sections("Fir"),
        sections("Dogwood", lake="A tarn, not a lake, below Dogwood pass."),
        first[4],
        sections("Fir", lake="Fir lake, revised: a reservoir behind a dam."),
    ]
    kbs = [
        PostgresKnowledgeBase(dsn, schema=f"{postgres_schema}_{how}", embedder=HashEmbedder(32))
        for how in ("batch", "single")
    ]
    batched, single = kbs
    for documents in (first, second):
        batched.add_documents(documents)
        for document in documents:
            single.add_documents([document])

    def state(kb, schema):
        stats = kb.stats()
        return (
            (stats.documents, stats.chunks, stats.vectors, stats.links),
            [(d.source, d.content_hash) for d in kb.store.documents()],
            sql(dsn, schema, "SELECT sum(chunks), sum(terms) FROM corpus_counters"),
            [
                [(c.id, round(c.score, 9)) for c in kb.search(query, mode=mode, top_k=20)]
                for query in ("glacier lake", "ridge trail larch", "reservoir dam", "hut twelve")
                for mode in ("bm25", "dense")
            ],
        )

    expected = state(single, f"{postgres_schema}_single")
    assert expected[0][:2] == (6, 6 * 3)  # a chunk a section
    assert state(batched, f"{postgres_schema}_batch") == expected
    for how in ("batch", "single"):
        assert counters_match_the_chunks(dsn, f"{postgres_schema}_{how}")
    assert batched.search("reservoir dam", mode="bm25")[0].source == "Fir.md"
    for kb in kbs:
        kb.close()


def test_a_collection_scope_is_applied_in_the_sql_before_the_limit(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(64))
    kb.add_documents(docs("big", 400), collection="big")
    kb.add_documents(docs("small", 3, words="alpine tent tent"), collection="small")
    for mode in ("bm25", "dense", "hybrid"):
        hits = kb.search("alpine tent note", mode=mode, top_k=3, collection="small")
        assert [c.metadata["collection"] for c in hits] == ["small"] * 3, mode
    hits = kb.search("alpine tent", mode="bm25", top_k=3, filters={"source": "big-7"})
    assert [c.source for c in hits] == ["big-7"]
    store = kb.store
    assert isinstance(store, PostgresStore)
    query = (
        "EXPLAIN SELECT c.pk FROM chunk_vectors v JOIN chunks c ON c.pk = v.chunk_pk {} "
        "ORDER BY v.embedding <=> %s::vector LIMIT 3"
    )
    with store._pool.connection() as conn:  # the plans: the filter in SQL, HNSW for the order
        conn.execute("SET LOCAL enable_seqscan = off")
        scoped, unscoped = (
            "\n".join(row[0] for row in conn.execute(query.format(where), params))
            for where, params in (
                ("WHERE c.collection = ANY (%s)", (["small"], [1.0] * 64)),
                ("", ([1.0] * 64,)),
            )
        )
    assert "collection = ANY ('{small}'::text[])" in scoped
    assert "Index Scan using chunks_embedding" in unscoped
    kb.close()


def test_migrations_run_once_even_when_two_processes_open_a_new_schema(dsn, postgres_schema):
    errors: list[BaseException] = []
    stores: list[PostgresStore] = []

    def open_store():
        try:
            stores.append(PostgresStore(dsn, schema=postgres_schema))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_store) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for store in stores:
        store.close()
    PostgresStore(dsn, schema=postgres_schema).close()  # re-run: nothing to do
    versions = sql(dsn, postgres_schema, "SELECT version FROM _ragloop_migrations")
    assert versions == [(number,) for number, _ in MIGRATIONS]


def test_storing_vectors_finds_the_chunks_waiting_for_one_by_index(dsn, postgres_schema):
    # without an index every stored vector scanned the whole table (7 ms each at 10,000
    # chunks, growing with it); a schema made before the index gets it when opened
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # as the store's first open does
        conn.execute(f'CREATE SCHEMA "{postgres_schema}"')
        conn.execute(f'SET search_path TO "{postgres_schema}", public')
        conn.execute("CREATE TABLE _ragloop_migrations (version integer PRIMARY KEY, "
                     "applied_at timestamptz NOT NULL DEFAULT now())")  # fmt: skip
        conn.execute(MIGRATIONS[0][1])
        conn.execute("INSERT INTO _ragloop_migrations (version) VALUES (1)")
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(16))
    kb.add_documents(docs("a", 200), vectors="later")
    store = kb.store
    queries = [  # a text's chunks, when its vector is stored; the next chunks without one
        "SELECT c.pk FROM chunks c WHERE c.text_hash = 'x'",
        "SELECT c.pk FROM chunks c WHERE c.pk > 0 AND NOT EXISTS "
        "(SELECT 1 FROM chunk_vectors v WHERE v.chunk_pk = c.pk) ORDER BY c.pk LIMIT 5",
    ]
    with store._pool.connection() as conn:
        conn.execute("ANALYZE chunks")
        conn.execute("SET enable_seqscan = off")  # a table this small is read whole otherwise
        plans = ["\n".join(row[0] for row in conn.execute(f"EXPLAIN {q}")) for q in queries]
    assert "using chunks_text_hash on" in plans[0]
    assert "using chunks_pkey on" in plans[1]
    assert "chunk_vectors_pkey" in plans[1]
    assert kb.embed() == 200
    assert kb.stats().vectors_missing == 0
    kb.close()


def test_read_commands_never_create_a_missing_schema(dsn, postgres_schema):
    with pytest.raises(KnowledgeBaseNotFound, match="ragloop ingest"):
        PostgresKnowledgeBase(dsn, schema=postgres_schema, create=False)
    exists = sql(
        dsn, "public", "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (postgres_schema,)
    )
    assert exists == [(0,)]


def test_an_unreachable_server_is_a_clear_error(postgres_server):
    dsn = f"postgresql://postgres:secret@127.0.0.1:{postgres_server.port + 1}/postgres"
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL at") as caught:
        PostgresStore(dsn, connect_timeout_s=2)
    assert "secret" not in str(caught.value)


def test_the_pool_reconnects_after_the_server_restarts(postgres_server, postgres_schema):
    kb = PostgresKnowledgeBase(postgres_server.dsn, schema=postgres_schema, embedder=None)
    kb.add_documents(docs("r", 3))
    assert kb.search("alpine tent", mode="bm25")
    postgres_server.restart()
    assert len(kb.search("alpine tent", mode="bm25")) == 3
    kb.add_documents(docs("after", 2))
    assert kb.stats().documents == 5
    kb.close()


def test_a_failure_mid_search_is_a_store_error_and_the_pool_recovers(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    kb.add_documents(docs("m", 3))
    sql(dsn, postgres_schema, "ALTER TABLE postings_blocks RENAME TO postings_away")
    with pytest.raises(StoreError, match=r"failed \(UndefinedTable\): .*postings_blocks"):
        kb.search("alpine tent", mode="bm25")
    with pytest.raises(StoreError, match="UndefinedTable"):  # writes too, no retry loop
        kb.add_documents(docs("n", 1))
    sql(dsn, postgres_schema, "ALTER TABLE postings_away RENAME TO postings_blocks")
    assert len(kb.search("alpine tent", mode="bm25")) == 3  # the same pool, still usable
    kb.close()


def test_deletes_and_replacements_keep_postings_and_counters_exact(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    kb.add_documents(docs("d", 6))
    kb.add_documents([Document(text="Rewritten: glacier lake.", source="d-2")])
    assert kb.delete("d-4") == 1
    assert counters_match_the_chunks(dsn, postgres_schema)
    hit = kb.search("glacier", mode="bm25")[0]
    assert hit.source == "d-2"
    assert 0.0 < hit.score <= 1.0
    kb.close()


def test_nul_characters_are_dropped_not_fatal(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    report = kb.add_documents(
        [Document(text="Nul\x00 inside the ridge text.", source="nul", metadata={"k": "a\x00b"})]
    )
    assert report.added == 1
    hit = kb.search("ridge", mode="bm25")[0]
    assert (hit.content, hit.metadata["k"]) == ("Nul inside the ridge text.", "ab")
    kb.close()


def test_a_search_writes_nothing_and_stats_count_chunk_vectors(dsn, postgres_schema):
    embedder = HashEmbedder(32)
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=embedder)
    kb.add_documents(docs("q", 2))
    kb.search("where is the tent", mode="dense")
    kb.close()
    store = PostgresStore(dsn, schema=postgres_schema)
    assert store.stats().vectors == 2  # the two chunks; the query was cached in memory only
    for wrong in ([1.0] * 8, [0.0] * 32):
        with pytest.raises(StoreError, match="query vector"):
            store.vector_search(wrong, 1, Scope())
    store.close()


async def test_async_search_through_the_retriever(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(32))
    kb.add_documents(docs("async", 4))
    hits = await kb.retriever(mode="hybrid").aretrieve("alpine tent", top_k=2)
    assert len(hits) == 2
    kb.close()


def ragloop(*args):
    return subprocess.run(
        [sys.executable, "-m", "ragloop", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )


def test_the_command_line_takes_a_postgresql_url(postgres_server, tmp_path):
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS cli")
        conn.execute("CREATE DATABASE cli")
    url = postgres_server.dsn_for("cli")
    corpus = write_corpus(tmp_path / "docs")
    missing = ragloop("search", "tent", "--kb", postgres_server.dsn_for("nodb"))
    assert missing.returncode == 1
    assert 'database "nodb" does not exist' in missing.stderr
    empty = ragloop("kb", "stats", "--kb", url)
    assert empty.returncode == 1
    assert "no ragloop knowledge base in postgresql://" in empty.stderr
    ingest = ragloop("ingest", str(corpus), "--kb", url, "--embedder", "hash", "--json")
    assert ingest.returncode == 0, ingest.stderr
    assert json.loads(ingest.stdout)["added"] == 4
    found = ragloop("search", "tent weight", "--kb", url, "--json", "--top-k", "1")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)[0]["source"].endswith("tents.md")
    stats = ragloop("kb", "stats", "--kb", url.replace("postgresql://", "postgres://"))
    assert stats.returncode == 0, stats.stderr
    assert "postgresql://postgres@127.0.0.1" in stats.stdout
    assert "chunks" in stats.stdout


def test_ragloop_imports_without_the_postgres_extra_and_says_what_to_install():
    code = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
        "import ragloop\n"
        "try:\n"
        "    ragloop.PostgresKnowledgeBase('postgresql://localhost/x')\n"
        "except ragloop.StoreError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "pip install 'ragloop[postgres]'" in done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_binaries_the_server_user_cannot_reach_are_copied_for_it(tmp_path):
    hidden = tmp_path / "site-packages"  # like a virtual environment under /root (mode 700)
    package = embedded_bin_dir().parent.parent
    for folder in (package, package.parent / f"{package.name}.libs"):
        shutil.copytree(folder, hidden / folder.name, symlinks=True)
    hidden.chmod(0o700)
    with TemporaryPostgres(bin_dir=hidden / package.name / "pginstall" / "bin") as server:
        assert server.bin_dir.is_relative_to(server.root)
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_vectors_too_wide_for_an_index_are_searched_exactly(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(2048))
    kb.add_documents([*docs("wide", 3), Document(text="Glacier lake walk.", source="lake")])
    assert kb.search("glacier lake", mode="dense", top_k=1)[0].source == "lake"
    query = "SELECT indexname FROM pg_indexes WHERE schemaname = %s"
    indexes = sql(dsn, postgres_schema, query, (postgres_schema,))
    assert "chunks_embedding" not in {row[0] for row in indexes}
    kb.close()


def vector_index(dsn, schema):
    query = "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s"
    rows = sql(dsn, schema, query, (schema, "chunks_embedding"))
    return rows[0][0] if rows else None


class IndexWatcher(HashEmbedder):
    """Records, at each batch it embeds, whether the HNSW index exists; fails when asked."""

    def __init__(self, dsn, schema, fail_at=None):
        super().__init__(16)
        self.dsn, self.schema, self.fail_at = dsn, schema, fail_at
        self.index_seen: list[bool] = []

    def embed(self, texts):
        self.index_seen.append(vector_index(self.dsn, self.schema) is not None)
        if self.fail_at is not None and len(self.index_seen) > self.fail_at:
            raise RuntimeError("the embedder broke")
        return super().embed(texts)


def test_a_bulk_fill_of_vectors_builds_the_hnsw_index_after_them(dsn, postgres_schema, monkeypatch):
    monkeypatch.setattr("ragloop.kb.stores.postgres.writes.BULK_VECTORS", 50)
    monkeypatch.setattr("ragloop.kb.ingest.pipeline.EMBED_BATCH", 40)
    watcher = IndexWatcher(dsn, postgres_schema)
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=watcher)
    kb.add_documents([*docs("a", 120), Document(text="Glacier lake walk.", source="lake")])
    assert watcher.index_seen == [False] * len(watcher.index_seen)  # built once, after
    built = vector_index(dsn, postgres_schema)
    assert "USING hnsw (embedding vector_cosine_ops) WITH (m='16', ef_construction='64')" in built
    assert kb.search("glacier lake", mode="dense", top_k=1)[0].source == "lake"
    # a few more: the index is kept up to date as they go
    watcher.index_seen.clear()
    kb.add_documents(docs("b", 10))
    assert watcher.index_seen == [True]
    kb.close()


def test_a_graph_too_big_for_the_build_memory_is_said_before_it_is_built(
    dsn, postgres_schema, monkeypatch, caplog
):
    monkeypatch.setattr("ragloop.kb.stores.postgres.writes.BULK_VECTORS", 50)
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(16))
    kb.add_documents(docs("a", 60), vectors="later")
    kb.store.index_build_memory_mb = 0  # below what any graph needs (config allows 64 up)
    with caplog.at_level("WARNING", logger="ragloop"):
        kb.embed()
    said = [r.getMessage() for r in caplog.records if "HNSW" in r.getMessage()]
    assert len(said) == 1
    assert "over 60 vectors needs about 1 MB" in said[0]
    assert "index_build_memory_mb is 0" in said[0]
    assert vector_index(dsn, postgres_schema) is not None  # built all the same
    caplog.clear()
    kb.store.index_build_memory_mb = 1024
    kb.add_documents(docs("b", 60))
    assert not [r for r in caplog.records if "HNSW" in r.getMessage()]
    kb.close()


def test_a_fill_that_fails_midway_still_ends_with_the_index(dsn, postgres_schema, monkeypatch):
    monkeypatch.setattr("ragloop.kb.stores.postgres.writes.BULK_VECTORS", 50)
    monkeypatch.setattr("ragloop.kb.ingest.pipeline.EMBED_BATCH", 40)
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(16))
    kb.add_documents(docs("a", 120), vectors="later")
    kb.close()
    broken = IndexWatcher(dsn, postgres_schema, fail_at=1)
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=broken)
    with pytest.raises(RuntimeError, match="the embedder broke"):
        kb.embed()
    assert broken.index_seen == [False, False]
    assert vector_index(dsn, postgres_schema) is not None
    assert 0 < kb.stats().vectors_missing < 120  # the first batch kept
    # a process killed mid-fill leaves no index: the next fill (even of nothing) builds it
    sql(dsn, postgres_schema, "DROP INDEX chunks_embedding")
    kb.close()
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(16))
    kb.embed()
    kb.embed()
    assert kb.stats().vectors_missing == 0
    assert vector_index(dsn, postgres_schema) is not None
    kb.close()


def test_a_knowledge_base_of_the_row_per_posting_layout_is_upgraded_in_place(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    kb.add_documents(docs("old", 40) + docs("older", 3, words="glacier lake"))
    before = [(c.id, c.score) for c in kb.search("alpine glacier note", mode="bm25", top_k=50)]
    kb.close()
    # the layout before migration 3: a row per posting, built from the chunks' tsvectors (and
    # before migration 4: the vectors a column of chunks)
    sql(
        dsn,
        postgres_schema,
        "CREATE TABLE postings AS SELECT t.lexeme, c.pk AS chunk_pk, c.collection, "
        "coalesce(array_length(t.positions, 1), 1) AS tf, c.n_terms FROM chunks c, unnest(c.tsv) t;"
        "DROP TABLE postings_blocks; ALTER TABLE chunks ADD COLUMN embedding vector;"
        "DROP TABLE chunk_vectors; DROP INDEX chunks_text_hash;"
        "ALTER TABLE corpus_counters DROP COLUMN writes; DROP TABLE collection_counters;"
        "DELETE FROM _ragloop_migrations WHERE version >= 3",
    )
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    after = [(c.id, c.score) for c in kb.search("alpine glacier note", mode="bm25", top_k=50)]
    assert after == before
    assert len(after) == 43
    assert counters_match_the_chunks(dsn, postgres_schema)
    assert sql(dsn, postgres_schema, "SELECT to_regclass('postings')")[0][0] is None
    kb.close()


def test_a_knowledge_base_with_vectors_in_its_chunks_rows_is_upgraded_in_place(
    dsn, postgres_schema
):
    kb = PostgresKnowledgeBase(
        dsn, schema=postgres_schema, embedder=HashEmbedder(16), hnsw_m=8, link_titles=False
    )
    kb.add_documents([*docs("old", 40), Document(text="Glacier lake walk.", source="lake")])
    kb.add_documents(docs("later", 5), vectors="later")
    before = [c.id for c in kb.search("glacier lake", mode="dense", top_k=10)]
    kb.close()
    # the layout before migration 4: the vector a column of chunks, indexed there
    sql(
        dsn,
        postgres_schema,
        "ALTER TABLE chunks ADD COLUMN embedding vector(16);"
        "UPDATE chunks c SET embedding = v.embedding FROM chunk_vectors v WHERE v.chunk_pk = c.pk;"
        "DROP TABLE chunk_vectors; DROP INDEX chunks_text_hash;"
        "CREATE INDEX chunks_embedding ON chunks USING hnsw (embedding vector_cosine_ops) "
        "WITH (m = 8, ef_construction = 64);"
        "CREATE INDEX chunks_missing_vector ON chunks (text_hash) WHERE embedding IS NULL;"
        "ALTER TABLE corpus_counters DROP COLUMN writes; DROP TABLE collection_counters;"
        "DELETE FROM _ragloop_migrations WHERE version >= 4",
    )
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=HashEmbedder(16))
    assert [c.id for c in kb.search("glacier lake", mode="dense", top_k=10)] == before
    assert kb.stats().vectors == 41
    assert kb.stats().vectors_missing == 5
    built = vector_index(dsn, postgres_schema)
    assert "ON " in built
    assert "chunk_vectors USING hnsw (embedding vector_cosine_ops)" in built
    assert "m='8'" in built
    assert kb.embed() == 5
    assert kb.stats().vectors == 46
    kb.delete("lake")  # its vector goes with it
    assert kb.stats().vectors == 45
    assert sql(dsn, postgres_schema, "SELECT count(*) FROM chunk_vectors")[0][0] == 45
    kb.close()


def test_phrases_looked_up_together_find_what_each_lookup_finds(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None, link_titles=False)
    kb.add_documents(
        [
            Document(text="The Ridge Line tent and the Lake Trail.", source="a"),
            Document(text="Ridge line of the mountains; a lake trail nearby.", source="b"),
            Document(text="Nothing here about it.", source="c"),
        ]
    )
    store = kb.store
    phrases = ["Ridge Line", "lake trail", "Lake Trail", "absent words", "!!"]
    together = store.chunks_with_phrases(phrases, 10)
    assert together == {p: store.chunks_with_phrase(p, 10) for p in phrases[:4]}
    assert [hit[1] for hit in together["Ridge Line"]] == ["default\0a", "default\0b"]
    assert together["absent words"] == []
    assert len(store.chunks_with_phrases(["ridge line"], 1)["ridge line"]) == 1
    kb.close()


def test_the_store_options_come_from_kb_postgres_in_ragloop_toml(
    dsn, postgres_schema, tmp_path, no_ragloop_settings
):
    from ragloop.cli.common import open_kb
    from ragloop.config import use_config_file

    config = tmp_path / "ragloop.toml"
    config.write_text(
        f'[kb.postgres]\nschema = "{postgres_schema}"\nef_search = 64\n'
        'iterative_scan = "strict_order"\nhnsw_m = 8\nindex_build_memory_mb = 256\n'
    )
    use_config_file(config)
    kb = open_kb(dsn, create=True, embedder="hash")
    store = kb.store
    assert (store.schema, store.ef_search, store.iterative_scan) == (
        postgres_schema,
        64,
        "strict_order",
    )
    assert (store.hnsw_m, store.index_build_memory_mb) == (8, 256)
    kb.add_documents(docs("toml", 2))
    assert len(kb.search("alpine tent", mode="dense", top_k=2)) == 2  # the scan mode is valid
    kb.close()
    config.write_text("[kb.postgres]\nef_search = 0\n")
    with pytest.raises(Exception, match="ef_search"):
        open_kb(dsn, create=True, embedder="hash")


def test_store_options_out_of_range_are_config_errors(dsn, postgres_schema):
    from ragloop.core.errors import ConfigError

    for bad in ({"ef_search": 5000}, {"iterative_scan": "sideways"}, {"hnsw_m": 1}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            PostgresStore(dsn, schema=postgres_schema, **bad)


@pytest.mark.parametrize("phase", ["reading", "embedding"])
def test_a_killed_ingest_loses_nothing_and_duplicates_nothing(
    dsn, postgres_schema, tmp_path, monkeypatch, phase
):
    import signal

    monkeypatch.setattr("ragloop.kb.stores.postgres.writes.BULK_VECTORS", 50)

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(400):
        (corpus / f"doc{i:03}.md").write_text(
            f"# Doc {i}\n\n" + f"Paragraph {i} about tents. " * 40
        )
    script = f"""
from ragloop.kb.ingest import pipeline
from ragloop.kb.stores.postgres import writes
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase
pipeline.WRITE_BATCH = 64  # batches of documents written in one transaction each
pipeline.EMBED_BATCH = 64
pipeline.STORE_EVERY_S = 0  # each batch stored before it is reported: some are in at the kill
writes.BULK_VECTORS = 50  # the vector index is dropped for the fill, built after it
kb = PostgresKnowledgeBase({dsn!r}, schema={postgres_schema!r}, embedder="hash")
def progress(state):
    print(state.phase, state.chunks_stored, state.chunks_embedded, flush=True)
kb.ingest({str(corpus)!r}, on_progress=progress)
"""
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as run:
        assert run.stdout is not None
        for line in run.stdout:
            now, stored, embedded = line.split()
            if now == phase and int(stored if phase == "reading" else embedded) >= 200:
                os.kill(run.pid, signal.SIGKILL)  # some batches in, more to come: no clean-up
                break
    assert run.returncode == -signal.SIGKILL
    partial = sql(dsn, postgres_schema, "SELECT count(*) FROM documents")[0][0]
    assert 0 < partial <= 400
    assert counters_match_the_chunks(dsn, postgres_schema)  # whole batches, nothing half
    if phase == "embedding":  # killed mid-fill: every text in, some vectors, the index gone
        missing = sql(
            dsn,
            postgres_schema,
            "SELECT count(*) FROM chunks c WHERE NOT EXISTS "
            "(SELECT 1 FROM chunk_vectors v WHERE v.chunk_pk = c.pk)",
        )
        assert partial == 400
        assert 0 < missing[0][0] < 400
        assert vector_index(dsn, postgres_schema) is None
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder="hash")
    report = kb.ingest(corpus)
    assert (report.unchanged, report.added) == (partial, 400 - partial)
    assert kb.stats().documents == 400
    assert kb.stats().vectors_missing == 0
    assert (
        sql(dsn, postgres_schema, "SELECT count(*) - count(DISTINCT text_hash) FROM chunks")[0][0]
        == 0
    )
    assert counters_match_the_chunks(dsn, postgres_schema)
    assert len(kb.search("paragraph about tents", mode="bm25", top_k=500)) == 400
    assert vector_index(dsn, postgres_schema) is not None
    kb.close()


def test_a_metadata_filter_far_down_the_ranking_still_gets_the_exact_top(dsn, postgres_schema):
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    strong = [  # rank first on "alpine tent", outside the filter
        Document(text=f"Alpine tent, alpine tent: the alpine tent {i}.", source=f"s{i}")
        for i in range(60)
    ]
    weak = [  # rank last, inside it: past the first windows of candidates
        Document(
            text=f"A long note {i} that mentions an alpine route once among many other words "
            "about weather, food, water, maps, boots and the way down.",
            source=f"w{i}",
            metadata={"team": "gear"},
        )
        for i in range(3)
    ]
    kb.add_documents(strong + weak)
    everything = kb.search("alpine tent", mode="bm25", top_k=100)
    assert [c.source for c in everything[-3:]] == ["w0", "w1", "w2"]
    found = kb.search("alpine tent", mode="bm25", top_k=2, filters={"team": "gear"})
    assert [c.source for c in found] == ["w0", "w1"]
    assert [c.score for c in found] == [c.score for c in everything[-3:-1]]
    scoped = kb.search("alpine", mode="bm25", top_k=5, filters={"team": "nobody"})
    assert scoped == []
    kb.close()


def test_the_kb_postgres_example_of_the_docs_is_valid_settings():
    import re
    import tomllib
    from pathlib import Path

    from ragloop.config import Settings

    text = (Path(__file__).parents[2] / "docs" / "postgres.md").read_text()
    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if "[kb.postgres]" in b]
    settings = Settings.model_validate(tomllib.loads(block))
    assert settings.kb.postgres.store_options()["schema"] == "handbook"
    assert settings.kb.postgres.index_build_memory_mb == 4096


def test_a_watched_folder_and_document_versions_on_postgresql(dsn, postgres_schema, tmp_path):
    from ragloop.kb.watch import FolderWatcher

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "lake.md").write_text("# Lake\n\nA quiet glacier lake below the pass.\n")
    (folder / "hut.md").write_text("# Hut\n\nThe hut sleeps twelve.\n")
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None)
    kb.ingest(folder)
    (hit,) = kb.search("glacier lake", mode="bm25", top_k=1)
    assert hit.metadata["document_version"] == kb.document_version("default", "lake.md")
    before = kb.document_version("default", "lake.md")

    stop, batches = threading.Event(), []
    watcher = FolderWatcher(kb, [folder])
    thread = threading.Thread(target=lambda: batches.extend(watcher.batches(stop)))
    thread.start()
    try:
        time.sleep(1)  # the watch begins
        (folder / "lake.md").write_text("# Lake\n\nA cold glacier lake, frozen until June.\n")
        (folder / "hut.md").unlink()
        deadline = time.monotonic() + 20
        while kb.document_version("default", "hut.md") is not None or kb.document_version(
            "default", "lake.md"
        ) in (None, before):
            assert time.monotonic() < deadline, batches
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(20)
    assert [c.source for c in kb.search("frozen June", mode="bm25")] == ["lake.md"]
    assert counters_match_the_chunks(dsn, postgres_schema)
    kb.close()

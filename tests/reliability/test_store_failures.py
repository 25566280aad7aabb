"""Issue 17, items 5 to 9: the SQLite store never returns what it should not, nor hides why it
failed.

5. a scoped search never returns another collection's chunk, even when a writer replaces rows
   between the index load and the row read (SQLite reuses freed row numbers);
6. a write that fails (a full disk, simulated with ``max_page_count``) raises ``StoreError``
   with the cause and leaves no cached vocabulary id behind;
7. a knowledge base this process may not write is searched read-only;
8. processes creating the same new knowledge base (or trace file) at once all succeed;
9. a damaged file, tampered rows or a newer schema give ``StoreError`` (a clean CLI error),
   never a raw traceback.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragloop import Document, KnowledgeBase
from ragloop.cli import main as cli
from ragloop.kb.stores.base import StoreError
from ragloop.kb.stores.sqlite.store import MIGRATIONS, SQLiteStore
from ragloop.observability.traces import TraceRecord, TraceStore
from tests.reliability.unprivileged import run_unprivileged, shared_tmp

WORDS = [f"w{n:03d}{chr(97 + n % 26)}x" for n in range(400)]


def _docs(prefix: str, n: int, words: int = 30) -> list[Document]:
    return [
        Document(
            text=" ".join(f"{prefix}{i} tents canvas pegs guyline {w}" for w in WORDS[:words]),
            source=f"{prefix}-{i}.md",
        )
        for i in range(n)
    ]


# -- 5. scope holds on the rows actually read --------------------------------------------------


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_a_scoped_search_never_returns_a_row_reused_by_another_collection(tmp_path, mode):
    """The public documents are written last, so they hold the highest row numbers; another
    process replaces them (freeing those numbers) with secret ones between the moment the
    search scored the rows and the moment it reads them."""
    path = tmp_path / "kb.sqlite"
    kb = KnowledgeBase(path, embedder="hash")
    kb.add_documents(_docs("other", 2), collection="other")
    kb.add_documents(_docs("public", 3), collection="public")
    writer = KnowledgeBase(path, embedder="hash")  # another connection, like another process
    chunks = {c.id for c in kb.search("tents canvas", top_k=50, collection="public", mode=mode)}
    assert chunks

    read_rows = kb.store._chunks
    done = []

    def replaced_in_between(*args, **kwargs):
        if not done:
            done.append(True)
            for doc in _docs("public", 3):
                writer.delete(doc.source, collection="public")
            writer.add_documents(_docs("secret", 3), collection="secret")
        return read_rows(*args, **kwargs)

    kb.store._chunks = replaced_in_between
    found = kb.search("tents canvas pegs", top_k=50, collection="public", mode=mode)
    assert done
    assert {c.metadata["collection"] for c in found} <= {"public"}
    assert not any(c.source.startswith("secret") for c in found)
    # and the next search sees the writer's change
    kb.store._chunks = read_rows
    assert kb.search("tents canvas", collection="public", mode=mode) == []
    assert {c.metadata["collection"] for c in kb.search("tents", top_k=50, mode=mode)} == {
        "other",
        "secret",
    }


# -- 6. a failed write: the real cause, and nothing cached from it --------------------------


def _fill_until_full(kb: KnowledgeBase, words: list[str]) -> StoreError:
    conn = kb.store._conn()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # the disk fills up during the write
    big = Document(
        text="\n\n".join(f"{w} {w}s {w}ed and more text {n}" for n, w in enumerate(words * 3)),
        source="big.md",
    )
    with pytest.raises(StoreError) as caught:
        kb.add_documents([big])
    conn.execute("PRAGMA max_page_count = 1073741823")
    return caught.value


def test_a_full_disk_raises_store_error_with_the_cause(tmp_path):
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    kb.add_documents([Document(text="tents and pegs", source="first.md")])
    error = _fill_until_full(kb, [f"filler{n}" for n in range(3000)])
    assert "full" in str(error)
    assert "cannot rollback" not in str(error)
    assert kb.store.sources("default") == ["first.md"]
    assert kb.store.integrity_check() == "ok"


@settings(
    max_examples=max(5, settings.default.max_examples // 5),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.permutations(WORDS))
def test_after_a_failed_write_every_word_still_finds_its_document(tmp_path_factory, words):
    """The failed write had cached ids for its new words; the rollback freed those ids, and a
    later document's words took them. Every word of the later documents must find them."""
    kb = KnowledgeBase(tmp_path_factory.mktemp("kb") / "kb.sqlite", embedder=None)
    kb.add_documents([Document(text="tents and pegs", source="first.md")])
    _fill_until_full(kb, words[:200])
    later = words[150:260]  # some of the failed write's words, and new ones
    kb.add_documents(
        [Document(text=f"{w} appears here", source=f"{w}.md") for w in later],
    )
    for word in later:
        found = kb.search(word, top_k=1, mode="bm25")
        assert [c.source for c in found] == [f"{word}.md"], word
    assert kb.store.integrity_check() == "ok"


# -- 7. read-only ------------------------------------------------------------------------------


def _search_read_only(path: str) -> tuple[list[str], int, str]:
    with KnowledgeBase(path, embedder="hash", create=False) as kb:
        hybrid = [c.source for c in kb.search("tents canvas", mode="hybrid", top_k=3)]
        chunks = kb.stats().chunks
        try:
            kb.add_documents([Document(text="new", source="new.md")])
        except StoreError as error:
            refused = str(error)
        else:
            refused = ""
    return hybrid, chunks, refused


@pytest.mark.parametrize("writer_open", [False, True], ids=["closed", "open-elsewhere"])
def test_a_knowledge_base_on_a_read_only_folder_can_be_searched(writer_open):
    with shared_tmp() as tmp:
        folder = tmp / "kb"
        folder.mkdir()
        path = folder / "kb.sqlite"
        with KnowledgeBase(path, embedder="hash") as kb:
            kb.add_documents(_docs("public", 2))
        owner = KnowledgeBase(path, embedder="hash") if writer_open else None
        if owner is not None:
            owner.search("tents")  # its -wal and -shm files exist while it is open
        path.chmod(0o444)
        folder.chmod(0o555)
        try:
            hybrid, chunks, refused = run_unprivileged(_search_read_only, str(path))
        finally:
            folder.chmod(0o755)
            if owner is not None:
                owner.close()
        assert hybrid
        assert chunks == 2
        assert "read-only" in refused


def test_the_cli_searches_a_read_only_knowledge_base():
    with shared_tmp() as tmp:
        folder = tmp / "kb"
        folder.mkdir()
        path = folder / "kb.sqlite"
        with KnowledgeBase(path, embedder="hash") as kb:
            kb.add_documents(_docs("public", 2))

        def search() -> tuple[int, str]:
            result = CliRunner().invoke(cli, ["search", "tents", "--kb", str(path), "--json"])
            return result.exit_code, f"{result.output}{result.exception!r}"

        # the command imports its modules on first use, and the child may not be able to read
        # them (a checkout under a private folder): imported here first, the fork has them
        assert search()[0] == 0
        folder.chmod(0o555)
        try:
            code, output = run_unprivileged(search)
        finally:
            folder.chmod(0o755)
        assert code == 0, output
        assert "public-0.md" in output


# -- 8. first open under concurrency -----------------------------------------------------------


def _open_knowledge_base(path: str) -> None:
    SQLiteStore(path).close()


def _knowledge_base_is_whole(path: str, processes: int) -> None:
    with sqlite3.connect(path) as conn:
        versions = sorted(v for (v,) in conn.execute("SELECT version FROM _ragloop_migrations"))
    assert versions == [version for version, _ in MIGRATIONS]


def _open_trace_store(path: str) -> None:
    store = TraceStore(path)
    store.save(TraceRecord(id=f"run-{os.getpid()}", engine="rag", started_at=0.0))
    store.close()


def _trace_file_is_whole(path: str, processes: int) -> None:
    assert len(TraceStore(path).list()) == processes  # every process stored its run


KNOWLEDGE_BASE = (_open_knowledge_base, _knowledge_base_is_whole)
TRACE_FILE = (_open_trace_store, _trace_file_is_whole)


def _open_at_once(opener, path: str, barrier, failures) -> None:
    barrier.wait()
    try:
        opener(path)
    except Exception as error:
        failures.put(f"{type(error).__name__}: {error}")


def _race(tmp_path: Path, file_kind, trials: int, processes: int = 3) -> list[str]:
    opener, is_whole = file_kind
    context = multiprocessing.get_context("fork")
    failures = context.SimpleQueue()
    for trial in range(trials):
        path = str(tmp_path / f"file-{trial}.sqlite")
        barrier = context.Barrier(processes)
        started = [
            context.Process(target=_open_at_once, args=(opener, path, barrier, failures))
            for _ in range(processes)
        ]
        for process in started:
            process.start()
        for process in started:
            process.join(60)
            assert process.exitcode == 0
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        is_whole(path, processes)
    found = []
    while not failures.empty():
        found.append(failures.get())
    return found


def test_processes_creating_one_knowledge_base_at_once_all_succeed(tmp_path):
    assert _race(tmp_path, KNOWLEDGE_BASE, trials=15) == []


def test_processes_creating_one_trace_file_at_once_all_store_their_runs(tmp_path):
    """Two servers sharing a new trace file: a run's trace was lost when its process opened
    the file while the other switched it to WAL ('database is locked', at once)."""
    assert _race(tmp_path, TRACE_FILE, trials=15) == []


@pytest.mark.fuzz
@pytest.mark.parametrize("file_kind", [KNOWLEDGE_BASE, TRACE_FILE], ids=["kb", "traces"])
def test_processes_creating_one_file_at_once_all_succeed_long(tmp_path, file_kind):
    assert _race(tmp_path, file_kind, trials=300) == []


# -- 9. damage and tampering are StoreError --------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("built") / "kb.sqlite"
    with KnowledgeBase(path, embedder="hash") as kb:
        kb.add_documents(_docs("doc", 40, words=60))
        kb.add_documents(
            [
                Document(text="# Canvas Tents\n\nA page about tents.", source="t.md"),
                Document(text="Pitch the Canvas Tents early.", source="u.md"),
            ],
        )
    return path


TAMPERING = {
    "dimension not a number": "UPDATE meta SET value = 'abc' WHERE key = 'dimension'",
    "dimension wrong": "UPDATE meta SET value = '7' WHERE key = 'dimension'",
    "generation not a number": "UPDATE meta SET value = 'x' WHERE key = 'generation'",
    "term blob odd": "UPDATE chunks SET terms = x'010203' WHERE pk % 3 = 0",
    "term ids huge": "UPDATE chunks SET terms = x'ffffff7f01000000' WHERE pk % 2 = 0",
    "chunk metadata JSON": "UPDATE chunks SET metadata = '{bad' ",
    "heading path JSON": "UPDATE chunks SET heading_path = '[bad' ",
    "document metadata JSON": "UPDATE documents SET metadata = 'nope' ",
    "vector blob short": "UPDATE vectors SET vector = x'0000'",
    "vector blob odd": "UPDATE vectors SET vector = x'000000000000'",
    "newer schema": "INSERT INTO _ragloop_migrations VALUES (99, 'later')",
    "table dropped": "DROP TABLE vocabulary",
}


def _every_operation(path: Path) -> list[str]:
    """Open, search in every mode, stats, ingest, and the CLI's search, stats and ask; what
    each raised, when it was anything but StoreError or a clean CLI error."""
    escaped = []
    try:
        kb = KnowledgeBase(path, embedder="hash")
    except StoreError:
        kb = None
    except Exception as error:
        return [f"open: {type(error).__name__}: {error}"]
    if kb is not None:
        operations = {
            **{
                f"search {mode}": lambda mode=mode: kb.search("tents canvas w001bx", mode=mode)
                for mode in ("bm25", "dense", "hybrid")
            },
            "stats": kb.stats,
            "ingest": lambda: kb.add_documents([Document(text="new words", source="n.md")]),
            "linked": lambda: kb.linked_chunks(["x"]),
        }
        for name, operation in operations.items():
            try:
                operation()
            except StoreError:
                pass
            except Exception as error:
                escaped.append(f"{name}: {type(error).__name__}: {error}")
        kb.close()
    for args in (["search", "tents"], ["kb", "stats"], ["ask", "what about tents?"]):
        result = CliRunner().invoke(cli, [*args, "--kb", str(path)])
        if result.exit_code not in (0, 1) or (
            result.exception is not None and not isinstance(result.exception, SystemExit)
        ):
            escaped.append(f"cli {args[0]}: {result.exception!r}")
    return escaped


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_tampered_rows_are_store_errors(built, tmp_path, case):
    path = tmp_path / "kb.sqlite"
    shutil.copy(built, path)
    with sqlite3.connect(path) as conn:
        conn.execute(TAMPERING[case])
    assert _every_operation(path) == []


def test_a_newer_schema_is_refused_by_name(built, tmp_path):
    path = tmp_path / "kb.sqlite"
    shutil.copy(built, path)
    with sqlite3.connect(path) as conn:
        conn.execute(TAMPERING["newer schema"])
    with pytest.raises(StoreError, match="newer ragloop"):
        KnowledgeBase(path, embedder="hash")
    result = CliRunner().invoke(cli, ["search", "tents", "--kb", str(path)])
    assert result.exit_code == 1
    assert "newer ragloop" in result.output


@settings(
    max_examples=settings.default.max_examples // 2,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.integers(0, 2**32), st.sampled_from([16, 512, 4096]))
def test_a_file_damaged_in_the_middle_gives_store_errors(built, tmp_path_factory, seed, size):
    path = tmp_path_factory.mktemp("damaged") / "kb.sqlite"
    data = bytearray(built.read_bytes())
    rng = random.Random(seed)
    at = rng.randrange(4096, len(data) - size)  # past the header page: the file still opens
    data[at : at + size] = rng.randbytes(size)
    path.write_bytes(bytes(data))
    assert _every_operation(path) == []


def test_a_file_that_is_not_a_knowledge_base(tmp_path):
    path = tmp_path / "kb.sqlite"
    path.write_bytes(os.urandom(10_000))
    with pytest.raises(StoreError):
        KnowledgeBase(path)

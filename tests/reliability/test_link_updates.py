"""Issue 17, item 10: updating documents gives the same link table as building the knowledge base
again from the same files (30 of 499 links used to point at another chunk of the right
document, or went missing, after an ordinary update).

Hypothesis writes small corpora whose titles and headings name each other (names repeated
across documents and within one, single-word names in both cases), ingests them, applies a
sequence of edits, additions and deletions, and compares the links with a fresh build of the
final documents.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragloop import Document, KnowledgeBase
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase

NAMES = ["Canvas Tents", "Alpine Stove", "River Crossing", "Paris", "paris", "Night Sky", "Trail"]
FILLER = ["word", "the", "tents", "stove", "camp", "river"]

paragraphs = st.lists(st.sampled_from(NAMES + FILLER), min_size=1, max_size=30).map(" ".join)
sections = st.tuples(st.sampled_from(NAMES), st.lists(paragraphs, min_size=1, max_size=3))
documents = st.tuples(st.sampled_from(NAMES), st.lists(sections, min_size=1, max_size=4))


def _document(source: str, spec: tuple[str, list[tuple[str, list[str]]]]) -> Document:
    title, body = spec
    text = "\n\n".join(
        f"## {heading}\n\n" + "\n\n".join(f"{source} {p}." for p in paras)
        for heading, paras in body
    )
    return Document(text=text, source=source, title=title, format="markdown")


def _links(kb: KnowledgeBase) -> set[tuple[str, str, str]]:
    ids = list(dict.fromkeys(chunk_id for _, chunk_id, _ in kb.store.link_targets()))
    return {(link.chunk_id, link.target_id, link.mention) for link in kb.store.links_from(ids)}


edits = st.lists(
    st.tuples(st.sampled_from(["edit", "add", "delete"]), st.integers(0, 9), documents),
    min_size=1,
    max_size=6,
)


def _build(kb: KnowledgeBase, docs: dict[str, Document]) -> None:
    kb.add_documents(docs[source] for source in sorted(docs))


@pytest.mark.parametrize("store", ["sqlite", "memory"])
@settings(
    max_examples=settings.default.max_examples * 3 // 5,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(corpus=st.lists(documents, min_size=2, max_size=8), changes=edits)
def test_updates_give_the_links_of_a_fresh_build(tmp_path_factory, store, corpus, changes):
    def new_kb() -> KnowledgeBase:
        if store == "memory":
            return KnowledgeBase.in_memory(embedder=None)
        return KnowledgeBase(tmp_path_factory.mktemp("kb") / "kb.sqlite", embedder=None)

    _check_updates(new_kb, corpus, changes)


@settings(
    max_examples=max(3, settings.default.max_examples // 10),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(corpus=st.lists(documents, min_size=2, max_size=6), changes=edits)
def test_updates_give_the_links_of_a_fresh_build_on_postgres(
    postgres_server, postgres_schema, corpus, changes
):
    schemas = itertools.count()

    def new_kb() -> KnowledgeBase:
        schema = f"{postgres_schema}_{next(schemas)}_{uuid.uuid4().hex[:8]}"
        return PostgresKnowledgeBase(postgres_server.dsn, schema=schema, embedder=None)

    _check_updates(new_kb, corpus, changes)


def _apply(kb: KnowledgeBase, docs: dict[str, Document], action: str, source: str, spec) -> None:
    """Delete, edit or add ``source``, in the knowledge base and in ``docs`` alike."""
    if action == "delete":
        docs.pop(source, None)
        kb.delete(source)
    else:
        docs[source] = _document(source, spec)
        kb.add_documents([docs[source]])


def _check_updates(new_kb, corpus, changes) -> None:
    docs = {f"doc{i}": _document(f"doc{i}", spec) for i, spec in enumerate(corpus)}
    updated = new_kb()
    _build(updated, docs)
    for action, number, spec in changes:
        _apply(updated, docs, action, f"doc{number}", spec)
    fresh = new_kb()
    _build(fresh, docs)
    assert _links(updated) == _links(fresh)
    updated.close()
    fresh.close()


@settings(
    max_examples=settings.default.max_examples * 3 // 5,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    corpus=st.lists(documents, min_size=1, max_size=6),
    linked_at_first=st.booleans(),
    changes=st.lists(
        st.tuples(
            st.sampled_from(["edit", "add", "delete"]), st.integers(0, 9), documents, st.booleans()
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_ingests_without_links_leave_the_links_of_later_ones_whole(
    tmp_path_factory, corpus, linked_at_first, changes
):
    """SQLite's phrase index is written only once a phrase is looked up (an ingest with
    links), then kept full: an ingest with links after ingests without them (row numbers of
    deleted chunks given again in between) links every chunk stored, as the in-memory store,
    which reads every chunk, does."""
    stores = [
        KnowledgeBase(tmp_path_factory.mktemp("kb") / "kb.sqlite", embedder=None),
        KnowledgeBase.in_memory(embedder=None),
    ]
    for kb in stores:
        docs = {f"doc{i}": _document(f"doc{i}", spec) for i, spec in enumerate(corpus)}
        kb.link_titles = linked_at_first
        _build(kb, docs)
        for action, number, spec, linked in changes:
            kb.link_titles = linked
            _apply(kb, docs, action, f"doc{number}", spec)
    sqlite, memory = stores
    assert _links(sqlite) == _links(memory)
    conn = sqlite.store._conn()
    lacking = conn.execute("SELECT value FROM meta WHERE key = 'phrases_from'").fetchone()
    (indexed,) = conn.execute("SELECT count(*) FROM chunks_fts").fetchone()
    (chunks,) = conn.execute("SELECT count(*) FROM chunks").fetchone()
    if lacking is None:
        assert indexed == chunks
    else:  # every chunk from 'phrases_from' on lacks its phrases, every one before has them
        (before,) = conn.execute(
            "SELECT count(*) FROM chunks WHERE pk < ?", (int(lacking[0]),)
        ).fetchone()
        assert indexed == before
    for kb in stores:
        kb.close()


def test_a_name_mentioned_everywhere_links_whatever_the_order(tmp_path):
    """A name found in more than 200 chunks used to get no links from the chunks stored before
    it (too common) but links from every chunk stored after it."""
    mentions = [
        Document(text=f"Note {i} about the Base Camp.", source=f"m{i:03d}") for i in range(250)
    ]
    target = Document(text="Where we sleep.", source="zz-camp", title="Base Camp")
    before = KnowledgeBase.in_memory(embedder=None)
    before.add_documents([target, *mentions])
    after = KnowledgeBase.in_memory(embedder=None)
    after.add_documents([*mentions, target])
    assert _links(before) == _links(after)
    assert len(_links(after)) == 250

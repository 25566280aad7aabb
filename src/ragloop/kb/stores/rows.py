"""The rules that turn stored rows into records, shared by the SQLite and PostgreSQL stores: a
chunk row into a :class:`~ragloop.Chunk`, the meta rows into the embedding model. Both select a
chunk as (pk, id, position, content, heading path, chunk metadata, collection, source, title,
document metadata, document content hash); a chunk's metadata is its document's, then its own,
then where it sits (collection, title, heading path, position) and which version of its
document it came from (``document_version``, the document's content hash: a trace that cites
the chunk can tell later whether the document changed)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ragloop.core.records import Chunk


def model_from_meta(conn: Any) -> tuple[str, int] | None:
    """The embedding model (id, dimension) recorded in a store's ``meta`` table, None before
    any: ``conn`` is a SQLite or a psycopg connection (both run ``conn.execute(sql)``)."""
    rows = dict(
        conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'dimension')"
        ).fetchall()
    )
    if "embedding_model" not in rows:
        return None
    return str(rows["embedding_model"]), int(rows["dimension"])


def parse_json(value: Any) -> Any:
    """A JSON value as SQLite stores it (text; the empty containers most rows hold skip the
    parser), or as PostgreSQL returns it (already parsed)."""
    if not isinstance(value, str):
        return value
    if value == "{}":
        return {}
    if value == "[]":
        return []
    return json.loads(value)


def chunk_from_row(row: Sequence[Any], score: float) -> Chunk:
    """The chunk of a row of the columns above, with ``score``."""
    (
        _pk,
        chunk_id,
        position,
        content,
        heading_path,
        chunk_meta,
        collection,
        source,
        title,
        doc_meta,
        document_version,
    ) = row
    metadata: dict[str, Any] = {**parse_json(doc_meta), **parse_json(chunk_meta)}
    metadata.update(
        collection=collection,
        title=title,
        heading_path=list(parse_json(heading_path)),
        position=position,
        document_version=document_version,
    )
    # the row was validated when it was written; a search returns many, so skip revalidation
    return Chunk.model_construct(
        content=content, source=source, score=score, metadata=metadata, id=chunk_id
    )

"""The knowledge base: read -> chunk -> store -> search, in one local file (or PostgreSQL).

- ``knowledge_base.py``: :class:`~ragloop.KnowledgeBase` (open, ingest, add documents, embed,
  delete, stats) and its :class:`~ragloop.KnowledgeBaseRetriever`; ``watch.py``: a collection
  kept in step with folders while they change; ``search.py``: what a search
  does (modes, query vectors, exact terms, fusion); ``routing.py``: RetrievalLoop's router over
  a knowledge base; ``metadata.py``: what of a chunk's metadata clients see;
- ``readers/``: a file's text -> a title and structural blocks (markdown, text, rst, html, json,
  jsonl, csv, pdf);
- ``ingest/``: discover files, name them, chunk, link titles, the ingest pipeline and its
  worker processes;
- ``index/``: in-memory search algorithms, no I/O (bm25, fusion, exact terms, ann, arrays saved
  beside a knowledge base);
- ``embedding/``: the embedders (MiniLM int8, e5, hash), the int8 ONNX session, the query
  embedding caches;
- ``stores/``: the :class:`~ragloop.Store` seam and its optional capabilities, the in-memory,
  SQLite and PostgreSQL stores.

``ragloop.retrieval.*``, the old paths of these modules, still import them.
"""

from ragloop.core.imports import lazy_face

_FACE = lazy_face(
    __name__,
    {
        "ragloop.kb.embedding.cache": ("ExactEmbeddingCache", "SemanticEmbeddingCache"),
        "ragloop.kb.embedding.embedders": ("E5Embedder", "MiniLMEmbedder", "get_embedder"),
        "ragloop.kb.ingest.chunking": ("ChunkingConfig",),
        "ragloop.kb.ingest.discover": ("IngestInterrupted", "IngestProgress", "IngestReport"),
        "ragloop.kb.knowledge_base": ("Document", "KnowledgeBase", "KnowledgeBaseRetriever"),
        "ragloop.kb.routing": ("RetrievalRouter",),
        "ragloop.kb.stores.base": ("Store",),
        "ragloop.kb.stores.postgres.store": ("PostgresKnowledgeBase", "PostgresStore"),
        "ragloop.kb.watch": ("FolderWatcher", "WatchBatch"),
    },
)
__all__ = _FACE.names


def __getattr__(name: str) -> object:
    return _FACE.resolve(name)


def __dir__() -> list[str]:
    return _FACE.dir()

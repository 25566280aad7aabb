"""The old home of the knowledge base, now :mod:`ragloop.kb`: every ``ragloop.retrieval.<module>``
path imports the module at its new place (the same module object), so code written against the
old paths keeps working. The fakes, the store conformance suite and the temporary PostgreSQL
server moved to :mod:`ragloop.testing`."""

from ragloop.core.imports import keep_old_paths

keep_old_paths(
    __name__,
    {
        "knowledge_base": "ragloop.kb.knowledge_base",
        "routing": "ragloop.kb.routing",
        "metadata": "ragloop.kb.metadata",
        "readers": "ragloop.kb.readers",
        "html_reader": "ragloop.kb.readers.html",
        "ingest": "ragloop.kb.ingest.discover",
        "sources": "ragloop.kb.ingest.sources",
        "ingest_run": "ragloop.kb.ingest.pipeline",
        "chunking": "ragloop.kb.ingest.chunking",
        "links": "ragloop.kb.ingest.links",
        "bm25": "ragloop.kb.index.bm25",
        "fusion": "ragloop.kb.index.fusion",
        "exact": "ragloop.kb.index.exact",
        "ann": "ragloop.kb.index.ann",
        "saved_arrays": "ragloop.kb.index.saved_arrays",
        "embedders": "ragloop.kb.embedding.embedders",
        "onnx_int8": "ragloop.kb.embedding.onnx_int8",
        "embedding_cache": "ragloop.kb.embedding.cache",
        "hash_embedder": "ragloop.kb.embedding.hash_embedder",
        "store": "ragloop.kb.stores.base",
        "store_memory": "ragloop.kb.stores.memory",
        "store_sqlite": "ragloop.kb.stores.sqlite.store",
        "store_postgres": "ragloop.kb.stores.postgres.store",
        "postgres_schema": "ragloop.kb.stores.postgres.schema",
        "conformance": "ragloop.testing.conformance",
        "postgres_server": "ragloop.testing.postgres",
    },
)

"""The PostgreSQL store (PostgreSQL >= 13 with pgvector >= 0.5). One object,
:class:`~.store.PostgresStore`, built from parts over one pool of connections:

- ``connection.py``: the pool, migrations, write transactions retried on deadlock, values for
  SQL;
- ``schema.py``: the migrations and the statements (BM25 in SQL, the batch writes);
- ``writes.py``: where a chunk is written (``PostgresWrites.replace_documents``), deletions,
  the embedding model and its HNSW index, vectors and links;
- ``reads.py``: documents, keyword and vector search, missing vectors, the link graph, stats;
- ``store.py``: :class:`~.store.PostgresStore` and :class:`~.store.PostgresKnowledgeBase`.
"""

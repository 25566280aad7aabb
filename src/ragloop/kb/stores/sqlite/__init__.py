"""The embedded store: one SQLite file. One object, :class:`~.store.SQLiteStore`, built from
parts that share its database:

- ``database.py``: connections, transactions, migrations, the meta table, the vocabulary's
  ids, reading chunk rows, failures as :class:`~ragloop.StoreError`;
- ``schema.py``: the migrations and the statements the parts share;
- ``write.py``: where a chunk is written (``Writes.replace_documents``), deletions, links;
- ``keyword.py``: the BM25 index and keyword search;
- ``dense.py``: the vectors (the embedding cache too) and dense search, exact or HNSW;
- ``indexes.py``: what the two indexes share (rows, copies saved beside the file, scopes);
- ``store.py``: :class:`~.store.SQLiteStore`, the Store protocol over the parts.
"""

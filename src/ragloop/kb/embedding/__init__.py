"""Embedders and what serves them: ``embedders.py`` (MiniLM int8, e5, the registry of names),
``onnx_int8.py`` (the int8 ONNX session), ``hash_embedder.py`` (vectors without a model),
``cache.py`` (the query-embedding caches); ``models/`` the packaged tokenizer."""

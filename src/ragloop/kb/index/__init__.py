"""In-memory search algorithms, no I/O: ``bm25.py`` (the keyword index), ``fusion.py``
(reciprocal rank fusion), ``exact.py`` (the query's code-like terms), ``ann.py`` (approximate
vector search), ``saved_arrays.py`` (arrays memory-mapped from one file beside a knowledge
base)."""

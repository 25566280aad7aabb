"""Persistence and the keyword and vector queries of a knowledge base: ``base.py`` (the
:class:`~ragloop.Store` protocol, its optional capabilities and the records it stores),
``memory.py``, ``sqlite/`` (the embedded store) and ``postgres/`` (PostgreSQL + pgvector). All
stores pass :mod:`ragloop.testing.conformance`."""

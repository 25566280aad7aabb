"""What the engines' ``offline`` constructors plug in: the parts, never an engine.

- :mod:`~ragloop.engines.defaults.rag`: RAGLoop's retriever, generator, evaluator,
  reformulator and config (the LLM-free components, or the LLM ones with ``model=``);
- :mod:`~ragloop.engines.defaults.agent`: AgentLoop's controller, search and settings;
- :mod:`~ragloop.engines.defaults.retrieval`: RetrievalLoop's understander, router, refiner,
  caches and config.

Each engine's ``offline`` asks for its parts and builds itself (an engine that searches through
a RetrievalLoop builds that loop too), so these modules import no engine: the arrows point from
the engines to their defaults, never back. See ``docs/offline.md`` for what each part is and the
measurements behind it.
"""

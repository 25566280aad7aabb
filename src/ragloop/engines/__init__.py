"""The loop engines. They depend only on the core protocols; what to plug in is decided by the
caller, by the CLI, or by an engine's ``offline`` constructor asking its defaults for parts.

- ``rag.py``: :class:`~ragloop.RAGLoop` (seed 000), retrieve -> generate -> evaluate ->
  reformulate; its stop rule is in ``_Run.execute``;
- ``agent.py`` + ``agent_run.py``: :class:`~ragloop.AgentLoop` (seed 001), a controller calling
  tools; ``tools.py`` the built-in tools and the collection scope; ``grounding.py``;
- ``retrieval.py`` + ``retrieval_run.py``: :class:`~ragloop.RetrievalLoop` (seeds 003/004),
  budgeted iterative retrieval;
- ``options.py``: every engine's config and typed options; ``_run.py``: the run / arun / astream
  skeleton the three share;
- ``defaults/``: the parts ``Engine.offline`` plugs in (never an engine);
  ``loop_search.py``: a RetrievalLoop as another engine's retriever or search tool.
"""

from ragloop.core.imports import lazy_face

_FACE = lazy_face(
    __name__,
    {
        "ragloop.engines.agent": ("AgentLoop",),
        "ragloop.engines.grounding": ("aground", "ground"),
        "ragloop.engines.options": ("LoopConfig", "RetrievalLoopConfig"),
        "ragloop.engines.rag": ("RAGLoop",),
        "ragloop.engines.retrieval": ("RetrievalLoop",),
    },
)
__all__ = _FACE.names


def __getattr__(name: str) -> object:
    return _FACE.resolve(name)


def __dir__() -> list[str]:
    return _FACE.dir()

"""The loop engines. They depend only on the core protocols; what to plug in is decided by the
caller (or by ``ragloop.offline`` and the CLI), never inside an engine."""

from ragloop.engines.agent import AgentLoop
from ragloop.engines.rag import LoopConfig, RAGLoop

__all__ = ["AgentLoop", "LoopConfig", "RAGLoop"]

"""Knowledge bases over the demo corpus for the offline components' tests.

``shop_kb``: keyword search only (fast, no model). ``shop_kb_dense``: the same corpus with a
small deterministic embedder whose vectors encode a handful of synonym groups, so the tests of
vocabulary shifts do not depend on a neural model's neighbourhoods (the demo tests use the real
default embedder).
"""

from __future__ import annotations

import hashlib
import math
import re

import pytest

from ragloop import KnowledgeBase
from ragloop.demo import demo_documents

# words that mean the same thing share a dimension; every other word gets its own hashed one
SYNONYMS = [
    {"rent", "renting", "rental", "rentals", "hire", "hired", "hiring"},
    {"refund", "refunds", "reimbursement", "money"},
    {"warranty", "guarantee", "guaranteed"},
    {"stove", "stoves", "burner"},
]


class SynonymEmbedder:
    """An embedder for tests: a text's vector is the normalised sum of its words' vectors."""

    model_id = "synonym-test"
    dimension = 1024

    def _index(self, word: str) -> int:
        for i, group in enumerate(SYNONYMS):
            if word in group:
                return i
        digest = int(hashlib.sha256(word.encode()).hexdigest(), 16)
        return len(SYNONYMS) + digest % (self.dimension - len(SYNONYMS))

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vector = [0.0] * self.dimension
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                vector[self._index(word)] += 1.0
            norm = math.sqrt(sum(v * v for v in vector)) or 1.0
            out.append([v / norm for v in vector])
        return out


@pytest.fixture(scope="session")
def shop_kb():
    kb = KnowledgeBase.in_memory(embedder=None)
    kb.add_documents(demo_documents())
    return kb


@pytest.fixture(scope="session")
def shop_kb_dense():
    kb = KnowledgeBase.in_memory(embedder=SynonymEmbedder())
    kb.add_documents(demo_documents())
    return kb

"""The hash embedder: vectors without a model, for tests and for a knowledge base that wants
dense search to run without one (the embedder named "hash")."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable

from ragloop.core.errors import ConfigError
from ragloop.core.text import tokenize


class HashEmbedder:
    """A deterministic embedder with no model: words and character trigrams hashed into
    ``dimension`` signed buckets, L2-normalised. Texts sharing words get similar vectors; the
    same text gives the same vector in every process. The knowledge base's embedder "hash"
    (``hash-256``, or ``hash-N`` for ``dimension`` N); ``ragloop.testing`` re-exports it for
    tests."""

    def __init__(self, dimension: int = 256) -> None:
        if dimension < 8:
            raise ConfigError("dimension", f"must be >= 8, got {dimension!r}")
        self.dimension = dimension
        self.model_id = f"hash-{dimension}"

    def _features(self, text: str) -> Iterable[tuple[str, float]]:
        for word in tokenize(text):
            yield f"w:{word}", 1.0
            padded = f"#{word}#"
            for i in range(len(padded) - 2):
                yield f"g:{padded[i : i + 3]}", 0.3

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimension
        for feature, weight in self._features(text):
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimension
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[bucket] += sign * weight
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector] if norm else vector

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)

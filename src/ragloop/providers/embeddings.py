"""Embeddings from an OpenAI-style ``/v1/embeddings`` endpoint (OpenAI, Ollama, vLLM, TEI...)."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from ragloop.core.budget import record_usage
from ragloop.core.errors import ConfigError, ModelError
from ragloop.core.records import Usage
from ragloop.providers.http import DEFAULT_TIMEOUT, RetryPolicy, excerpt
from ragloop.providers.openai_compat import openai_connection
from ragloop.providers.pricing import ModelPrice, lookup_price

# The length of each model's vectors when no ``dimensions`` is asked for.
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class _Item(BaseModel):
    index: int
    embedding: list[float]


class _Embeddings(BaseModel):
    data: list[_Item]
    usage: dict[str, Any] | None = None


class OpenAICompatibleEmbedder:
    """An :class:`~ragloop.Embedder` over ``/v1/embeddings``, sending ``batch_size`` texts per
    request.

    ``dimension`` is the length of the vectors: known for OpenAI's models, required for others
    (it is checked against every vector returned). For OpenAI's ``text-embedding-3-*`` models a
    ``dimension`` is also sent as ``dimensions``, which shortens the vectors. ``base_url`` and
    ``api_key`` follow the rules of :class:`~ragloop.OpenAICompatibleModel`. The usage of every
    request is charged to the run in progress.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimension: int | None = None,
        batch_size: int = 128,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        price: ModelPrice | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model", f"must name a model, got {model!r}")
        if not (isinstance(batch_size, int) and batch_size >= 1):
            raise ConfigError("batch_size", f"must be an integer >= 1, got {batch_size!r}")
        if dimension is None:
            dimension = KNOWN_DIMENSIONS.get(model)
            if dimension is None:
                raise ConfigError(
                    "dimension",
                    f"the vector length of {model!r} is not known; pass dimension=N "
                    "(the length of the vectors the model returns)",
                )
            self._ask_dimensions = False
        else:
            if not (isinstance(dimension, int) and dimension >= 1):
                raise ConfigError("dimension", f"must be an integer >= 1, got {dimension!r}")
            self._ask_dimensions = model.startswith("text-embedding-3")
        self.model_id = model
        self.model_name = model
        self.dimension = dimension
        self.batch_size = batch_size
        self.price = price if price is not None else lookup_price(model)
        self.provider, self._connection = openai_connection(
            base_url, api_key, timeout=timeout, retry=retry, http_client=http_client
        )

    def __repr__(self) -> str:
        return (
            f"OpenAICompatibleEmbedder({self.model_id!r}, dimension={self.dimension}, "
            f"base_url={self._connection.base_url!r})"
        )

    def _batches(self, texts: list[str]) -> list[list[str]]:
        return [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]

    def _payload(self, batch: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model_id, "input": batch}
        if self._ask_dimensions:
            payload["dimensions"] = self.dimension
        return payload

    def _read(self, data: Any, expected: int) -> list[list[float]]:
        where = f"{self._connection.base_url}/embeddings"
        try:
            reply = _Embeddings.model_validate(data)
        except ValidationError as error:
            first = str(error).splitlines()[0]
            raise ModelError(
                f"{where} returned no embeddings ({first}): {excerpt(str(data))}"
            ) from None
        items = sorted(reply.data, key=lambda item: item.index)
        if [item.index for item in items] != list(range(expected)):
            raise ModelError(f"{where} returned {len(items)} embeddings for {expected} texts")
        for item in items:
            if len(item.embedding) != self.dimension:
                raise ModelError(
                    f"{where} returned a vector of length {len(item.embedding)}; "
                    f"{self.model_id!r} was configured with dimension={self.dimension}"
                )
        if reply.usage:
            tokens = reply.usage.get("prompt_tokens")
            if isinstance(tokens, int) and tokens >= 0:
                cost = self.price.cost(tokens, 0) if self.price is not None else None
                record_usage(Usage(input_tokens=tokens, cost_usd=cost))
        return [item.embedding for item in items]

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        vectors: list[list[float]] = []
        for batch in self._batches(list(texts)):
            data = self._connection.post_json("/embeddings", self._payload(batch))
            vectors.extend(self._read(data, len(batch)))
        return vectors

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        """:meth:`embed` for async code."""
        vectors: list[list[float]] = []
        for batch in self._batches(list(texts)):
            data = await self._connection.apost_json("/embeddings", self._payload(batch))
            vectors.extend(self._read(data, len(batch)))
        return vectors

    def close(self) -> None:
        """Close the connection pool made for :meth:`embed`."""
        self._connection.close()

"""Cost estimation for the retrieval loop: tokens (and dollars) per stage when no provider says.

Seed 004 charged a flat per-iteration guess; :class:`DefaultCostEstimator` attributes tokens to
the stage that spends them instead. The loop asks it only for work no provider reported usage
for (a provider's reported usage always wins), and never for embedding-cache hits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragloop.core.errors import ConfigError
from ragloop.core.records import Usage
from ragloop.core.text import count_tokens

STAGES = ("understand", "embed", "retrieve", "rerank")


class DefaultCostEstimator:
    """Per-stage token estimates (:func:`~ragloop.core.text.count_tokens`):

    - ``understand``: a model call: each input plus ``prompt_overhead_tokens`` of instructions
      in, the outputs (rewrite, parts, HyDE passage) out;
    - ``embed``: every text embedded, in;
    - ``retrieve``: ``retrieve_tokens_per_query`` per query (0: a local index reads no model
      tokens; set it for a hosted search billed in tokens);
    - ``rerank``: every query-passage pair a cross-encoder reads, in.

    ``usd_per_million`` prices a stage's tokens (``{"embed": 0.02}``); unpriced stages cost no
    dollars.
    """

    def __init__(
        self,
        *,
        prompt_overhead_tokens: int = 350,
        retrieve_tokens_per_query: int = 0,
        usd_per_million: Mapping[str, float] | None = None,
    ) -> None:
        for name, value in (
            ("prompt_overhead_tokens", prompt_overhead_tokens),
            ("retrieve_tokens_per_query", retrieve_tokens_per_query),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(name, f"must be an integer >= 0, got {value!r}")
        prices = dict(usd_per_million or {})
        for stage, price in prices.items():
            if stage not in STAGES:
                raise ConfigError("usd_per_million", f"unknown stage {stage!r}; one of {STAGES}")
            if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
                raise ConfigError("usd_per_million", f"{stage}: must be a number >= 0")
        self.prompt_overhead_tokens = prompt_overhead_tokens
        self.retrieve_tokens_per_query = retrieve_tokens_per_query
        self.usd_per_million = prices

    def estimate(self, stage: str, inputs: Sequence[str], outputs: Sequence[str] = ()) -> Usage:
        read = sum(count_tokens(text) for text in inputs)
        written = 0
        if stage == "understand":
            read += self.prompt_overhead_tokens * len(inputs)
            written = sum(count_tokens(text) for text in outputs)
        elif stage == "retrieve":
            read = self.retrieve_tokens_per_query * len(inputs)
        elif stage not in STAGES:
            raise ConfigError("stage", f"unknown stage {stage!r}; one of {STAGES}")
        price = self.usd_per_million.get(stage)
        cost = None if price is None else (read + written) * price / 1_000_000
        return Usage(input_tokens=read, output_tokens=written, cost_usd=cost)

"""What model calls cost: a price table for common OpenAI and Anthropic models.

Prices are US dollars per million tokens, standard (not batch) tier, from the providers' pricing
pages (platform.openai.com/docs/pricing and docs.anthropic.com/en/docs/about-claude/pricing) as
published between 2025-08 and 2026-03; they change, so check them before trusting a dollar
budget with real money. Anthropic prompt-cache writes cost 1.25x the input price and cache reads
0.1x (the 5-minute cache, from the same page). OpenAI's cached-input discount is not modelled:
cached tokens are counted at the full input price, so an OpenAI cost is an upper estimate.

A model missing from the table has an unknown price: its calls report ``cost_usd=None`` and a
``Budget(max_dollars=...)`` cannot stop them. Pass ``price=ModelPrice(...)`` to a model to
price it yourself (``ModelPrice(0, 0)`` for a local server).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragloop.core.errors import ConfigError


@dataclass(frozen=True)
class ModelPrice:
    """US dollars per million tokens. Cache prices default to the input price."""

    input_per_million: float
    output_per_million: float
    cache_write_per_million: float | None = None
    cache_read_per_million: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "input_per_million",
            "output_per_million",
            "cache_write_per_million",
            "cache_read_per_million",
        ):
            value = getattr(self, name)
            if value is not None and not value >= 0:  # also rejects NaN
                raise ConfigError(name, f"a price must be >= 0, got {value!r}")

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cache_write_tokens: int = 0,
        cache_read_tokens: int = 0,
    ) -> float:
        """Dollars for a call; ``input_tokens`` excludes the cache write and read tokens."""
        write = self.cache_write_per_million
        read = self.cache_read_per_million
        dollars_times_million = (
            input_tokens * self.input_per_million
            + output_tokens * self.output_per_million
            + cache_write_tokens * (self.input_per_million if write is None else write)
            + cache_read_tokens * (self.input_per_million if read is None else read)
        )
        return dollars_times_million / 1_000_000


def _anthropic(input_price: float, output_price: float) -> ModelPrice:
    return ModelPrice(input_price, output_price, input_price * 1.25, input_price * 0.1)


PRICES: dict[str, ModelPrice] = {
    # OpenAI chat models
    "gpt-5": ModelPrice(1.25, 10.00),
    "gpt-5-mini": ModelPrice(0.25, 2.00),
    "gpt-5-nano": ModelPrice(0.05, 0.40),
    "gpt-4.1": ModelPrice(2.00, 8.00),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40),
    "gpt-4o": ModelPrice(2.50, 10.00),
    "gpt-4o-2024-05-13": ModelPrice(5.00, 15.00),  # the first gpt-4o snapshot cost more
    "gpt-4o-mini": ModelPrice(0.15, 0.60),
    "o1": ModelPrice(15.00, 60.00),
    "o3": ModelPrice(2.00, 8.00),
    "o3-mini": ModelPrice(1.10, 4.40),
    "o4-mini": ModelPrice(1.10, 4.40),
    "gpt-4-turbo": ModelPrice(10.00, 30.00),
    "gpt-3.5-turbo": ModelPrice(0.50, 1.50),
    # OpenAI embedding models (input only)
    "text-embedding-3-small": ModelPrice(0.02, 0.0),
    "text-embedding-3-large": ModelPrice(0.13, 0.0),
    "text-embedding-ada-002": ModelPrice(0.10, 0.0),
    # Anthropic
    "claude-opus-4-5": _anthropic(5.00, 25.00),
    "claude-opus-4-1": _anthropic(15.00, 75.00),
    "claude-opus-4": _anthropic(15.00, 75.00),
    "claude-sonnet-4-5": _anthropic(3.00, 15.00),
    "claude-sonnet-4": _anthropic(3.00, 15.00),
    "claude-3-7-sonnet": _anthropic(3.00, 15.00),
    "claude-3-5-sonnet": _anthropic(3.00, 15.00),
    "claude-haiku-4-5": _anthropic(1.00, 5.00),
    "claude-3-5-haiku": _anthropic(0.80, 4.00),
    "claude-3-opus": _anthropic(15.00, 75.00),
    "claude-3-haiku": _anthropic(0.25, 1.25),
}

# Snapshot and alias suffixes that do not change the price: "-2024-07-18", "-20250514",
# "-latest", and Anthropic's "-0" aliases ("claude-sonnet-4-0").
_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest|0)$")


def lookup_price(model: str) -> ModelPrice | None:
    """The price of ``model`` (a dated snapshot or alias finds its base model), or None."""
    name = model.strip().lower()
    while name not in PRICES:
        shorter = _SUFFIX.sub("", name)
        if shorter == name:
            return None
        name = shorter
    return PRICES[name]


def describe_price(model: str) -> str:
    """One line saying what ``model`` costs, or that its price is unknown."""
    price = lookup_price(model)
    if price is None:
        return (
            f"unknown: no price for {model!r}, so its calls report no cost and a dollar budget "
            "cannot stop them (pass price=ModelPrice(...) to the model)"
        )
    return (
        f"{model}: ${price.input_per_million:g} input, ${price.output_per_million:g} output "
        "per million tokens"
    )

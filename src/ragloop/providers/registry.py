"""One way to name a model everywhere (the API and the CLI).

=======================================================  ==========================================
spec                                                      model
=======================================================  ==========================================
``openai:gpt-4o-mini``                                    OpenAI (or ``OPENAI_BASE_URL``)
``anthropic:claude-sonnet-4-5``                           Anthropic (or ``ANTHROPIC_BASE_URL``)
``openai-compatible:http://localhost:11434/v1#llama3.1``  any OpenAI-style server, by URL and name
``offline`` (or None)                                     no LLM: the offline components
=======================================================  ==========================================

Keys and base URLs follow ``ragloop.providers.endpoints``; keyword options go to the model's
constructor (``api_key=``, ``timeout=``, ``temperature=``, ...).
"""

from __future__ import annotations

from typing import Any

from ragloop.core.errors import ConfigError
from ragloop.providers.anthropic import AnthropicModel
from ragloop.providers.embeddings import OpenAICompatibleEmbedder
from ragloop.providers.openai_compat import OpenAICompatibleModel

OFFLINE = "offline"
SPEC_FORMS = "'openai:MODEL', 'anthropic:MODEL', 'openai-compatible:BASE_URL#MODEL' or 'offline'"


def _parse(spec: str) -> tuple[str, str, str | None]:
    """(provider, model, base URL) of a spec; raises ConfigError naming ``model``."""
    if not isinstance(spec, str):
        raise ConfigError("model", f"a model spec is a string such as {SPEC_FORMS}")
    provider, sep, rest = spec.strip().partition(":")
    provider = provider.lower()
    if not sep or not rest:
        raise ConfigError("model", f"{spec!r} names no model; use {SPEC_FORMS}")
    if provider == "openai-compatible":
        base_url, sep, model = rest.rpartition("#")
        if not sep or not base_url or not model:
            raise ConfigError(
                "model",
                f"{spec!r}: an openai-compatible spec is 'openai-compatible:BASE_URL#MODEL', "
                "e.g. 'openai-compatible:http://localhost:11434/v1#llama3.1'",
            )
        return provider, model, base_url
    if provider in ("openai", "anthropic"):
        return provider, rest, None
    raise ConfigError("model", f"unknown provider {provider!r} in {spec!r}; use {SPEC_FORMS}")


def get_model(spec: str, **options: Any) -> OpenAICompatibleModel | AnthropicModel:
    """The chat model a spec names (see the module docstring); ``options`` go to its
    constructor. An ``openai-compatible`` spec's URL is the model's ``base_url``."""
    provider, model, base_url = _parse(spec)
    if base_url is not None:
        if options.get("base_url") not in (None, base_url):
            raise ConfigError("base_url", f"given twice: in {spec!r} and as base_url=")
        options["base_url"] = base_url
    if provider == "anthropic":
        return AnthropicModel(model, **options)
    return OpenAICompatibleModel(model, **options)


def resolve_model(
    spec: str | None, **options: Any
) -> OpenAICompatibleModel | AnthropicModel | None:
    """:func:`get_model`, except that None, ``""`` and ``"offline"`` mean "no LLM" (None)."""
    if spec is None or spec.strip().lower() in ("", OFFLINE):
        return None
    return get_model(spec, **options)


def get_embedder(spec: str, **options: Any) -> OpenAICompatibleEmbedder:
    """The embedder a spec names: ``openai:text-embedding-3-small`` or
    ``openai-compatible:BASE_URL#MODEL`` (pass ``dimension=`` for models other than OpenAI's)."""
    provider, model, base_url = _parse(spec)
    if provider == "anthropic":
        raise ConfigError("model", f"{spec!r}: Anthropic has no embeddings API")
    if base_url is not None:
        options["base_url"] = base_url
    return OpenAICompatibleEmbedder(model, **options)

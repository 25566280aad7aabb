"""Where a provider's requests go and which API key goes with them.

Base URLs and keys come from the arguments, else from the environment: ``RAGLOOP_<P>_BASE_URL``
over ``<P>_BASE_URL`` over the provider's public URL, for ``<P>`` in ``OPENAI`` and
``ANTHROPIC``. Explicit arguments always win.

A key never goes to a base URL it was not configured for (simonw/llm's rule for
OpenAI-compatible servers): ``OPENAI_API_KEY`` belongs to ``OPENAI_BASE_URL`` (or, when that is
unset, to api.openai.com), ``RAGLOOP_OPENAI_API_KEY`` to ``RAGLOOP_OPENAI_BASE_URL`` (or, when
that is unset, to wherever ``OPENAI_API_KEY`` belongs). So a model pointed at a local server by
``base_url=`` receives no key from the environment unless that same URL is the one configured
there; pass ``api_key=`` to send one.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from ragloop.core.errors import ConfigError, ModelError


@dataclass(frozen=True)
class ProviderEnv:
    """The environment variables and public URL of one provider family."""

    name: str
    public_base_url: str
    # (key variable, base-URL variable) pairs, the overriding pair first
    pairs: tuple[tuple[str, str], ...]


OPENAI_ENV = ProviderEnv(
    "openai",
    "https://api.openai.com/v1",
    (("RAGLOOP_OPENAI_API_KEY", "RAGLOOP_OPENAI_BASE_URL"), ("OPENAI_API_KEY", "OPENAI_BASE_URL")),
)
ANTHROPIC_ENV = ProviderEnv(
    "anthropic",
    "https://api.anthropic.com",
    (
        ("RAGLOOP_ANTHROPIC_API_KEY", "RAGLOOP_ANTHROPIC_BASE_URL"),
        ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    ),
)


@dataclass(frozen=True)
class Endpoint:
    """A resolved base URL and the key to send there (None: send none)."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    # True when base_url is the provider's own public API, which refuses requests without a key
    is_public_api: bool = False
    # why no key is sent, for the error a missing key causes
    no_key_reason: str = ""


def _same_url(a: str, b: str) -> bool:
    def key(url: str) -> tuple[str, str, int | None, str]:
        parsed = httpx.URL(url.strip())
        default_port = {"http": 80, "https": 443}.get(parsed.scheme)
        return (parsed.scheme, parsed.host, parsed.port or default_port, parsed.path.rstrip("/"))

    return key(a) == key(b)


def _check_base_url(base_url: str, source: str) -> str:
    url = base_url.strip()
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        raise ConfigError(source, f"not a URL: {base_url!r} ({error})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(source, f"must be an http:// or https:// URL, got {base_url!r}")
    return url.rstrip("/")


def resolve_endpoint(
    env: ProviderEnv,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Endpoint:
    """The base URL and key for ``env``'s provider under the rules in this module's docstring."""
    environ = os.environ if environ is None else environ
    # (key variable, key, base-URL variable, base URL) per pair, unset values as None
    pairs = [(k, environ.get(k) or None, b, environ.get(b) or None) for k, b in env.pairs]

    if base_url is not None:
        base = _check_base_url(base_url, "base_url")
    else:
        base = env.public_base_url
        for _, _, base_var, env_base in pairs:
            if env_base:
                base = _check_base_url(env_base, base_var)
                break
    public = _same_url(base, env.public_base_url)
    if api_key:
        return Endpoint(base, api_key, public)

    # A key belongs to its own pair's base URL, or to where the next pair's key belongs.
    owner = env.public_base_url
    owners: list[str] = []
    for _, _, _, env_base in reversed(pairs):
        owner = env_base or owner
        owners.insert(0, owner)
    for (_, key, _, _), key_owner in zip(pairs, owners, strict=True):
        if key and _same_url(key_owner, base):
            return Endpoint(base, key, public)

    unsent = [key_var for key_var, key, _, _ in pairs if key]
    if unsent:
        reason = (
            f"{' and '.join(unsent)} not sent: configured for another base URL than {base}; "
            "pass api_key= to send a key there"
        )
    else:
        reason = f"no API key: set {' or '.join(k for k, *_ in pairs)}, or pass api_key="
    return Endpoint(base, None, public, reason)


# -- the switch: whether a request may go there at all ----------------------------------------


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_allowed(url: httpx.URL) -> None:
    """Raise :class:`~ragloop.ModelError` if the switch forbids a request to ``url``."""
    from ragloop import providers  # the switch lives on the package, where users set it

    allowed = providers.ALLOW_MODEL_REQUESTS
    if allowed is True or (allowed == "loopback" and is_loopback(url.host)):
        return
    raise ModelError(
        f"model requests are switched off (ragloop.providers.ALLOW_MODEL_REQUESTS = "
        f"{allowed!r}); refused a request to {url}. In tests use ragloop.testing.ScriptedModel, "
        "or override_allow_model_requests('loopback') for a server on 127.0.0.1"
    )

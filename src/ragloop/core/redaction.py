"""Keeping secrets out of messages, logs, traces and spans.

:func:`redact` replaces what looks like a credential in a text with ``***``:

- the user information of a URL (``https://user:KEY@host`` -> ``https://user:***@host``, a lone
  token as user name too);
- the value of query and fragment parameters named like credentials (``?key=``, ``api_key``,
  ``X-Amz-Signature``, ``private_token``, ``#access_token=``: :func:`is_secret_parameter`);
- header-style credentials (``Authorization: Bearer ...``, ``"x-api-key": "..."``);
- the shapes of common provider keys (``sk-...``, ``sk-ant-...``, ``AIza...``, ``ghp_...``,
  ``hf_...``, JSON web tokens, ...);
- every secret registered with :func:`register_secret` (the providers register the API keys
  they send), whatever its shape: a server that echoes the request headers in an error body
  echoes them redacted.

Errors ragloop raises are redacted where they are made (a provider's URL and reply excerpt);
the telemetry sinks (events, logs, spans, stored traces) redact everything again.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

MASK = "***"
_MIN_SECRET_CHARS = 8  # shorter values would mask ordinary words

_SECRET_NAMES = (
    r"api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|key|secret|password|passwd"
    r"|client[_-]?secret|sig|signature|x-api-key|x-goog-api-key|api-token"
)
# a URL parameter holds a credential when its name, lower-cased without "-" and "_", is one of
# these or ends with one of the suffixes (X-Amz-Signature, private_token, client_secret, ...)
SECRET_PARAMETERS = frozenset(
    {"key", "sig", "auth", "jwt", "bearer", "pass", "pwd", "session", "code", "credential"}
)
SECRET_PARAMETER_SUFFIXES = (
    "apikey",
    "token",
    "secret",
    "signature",
    "password",
    "passwd",
    "credential",
    "sessionid",
    "auth",
    "jwt",
)


def is_secret_parameter(name: str) -> bool:
    """Whether a URL query or fragment parameter of this name carries a credential."""
    normalised = name.lower().replace("-", "").replace("_", "").replace("%2d", "")
    return normalised in SECRET_PARAMETERS or normalised.endswith(SECRET_PARAMETER_SUFFIXES)


def _masked_parameter(found: re.Match[str]) -> str:
    separator, name, value = found.group(1), found.group(2), found.group(3)
    return f"{separator}{name}={MASK if is_secret_parameter(name) else value}"


_PATTERNS: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    # URL user information: keep the user name when a password follows it
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/@:]+):([^\s/@]+)@"), rf"\1\2:{MASK}@"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/@:]+)@"), rf"\1{MASK}@"),
    # query (and fragment: #access_token=...) parameters named like credentials
    (re.compile(r"([?&#;])([\w.%-]+)=([^&#;\s\"'<>]+)"), _masked_parameter),
    # Authorization headers and their values
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=\-]{8,}"), rf"\1\2{MASK}"),
    (
        re.compile(
            rf"(?i)((?<![\w-])[\"']?(?:authorization|proxy-authorization|{_SECRET_NAMES})[\"']?"
            r"\s*[:=]\s*[\"']?)"
            r"(?!bearer\b|basic\b|token\b|\*\*\*)[^\s\"',;}&]{8,}"
        ),
        rf"\1{MASK}",
    ),
    # the shapes of common keys
    (
        re.compile(
            r"\b(?:sk-[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|gh[pousr]_[A-Za-z0-9]{20,}"
            r"|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}|gsk_[A-Za-z0-9]{20,}"
            r"|xai-[A-Za-z0-9]{20,}|xox[abpr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}"
            r"|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,})"
        ),
        MASK,
    ),
]

_secrets: set[str] = set()
_secrets_pattern: re.Pattern[str] | None = None
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever :func:`redact` sees it from now on (for this process)."""
    global _secrets_pattern
    if not value or len(value) < _MIN_SECRET_CHARS:
        return
    with _lock:
        if value in _secrets:
            return
        _secrets.add(value)
        longest_first = sorted(_secrets, key=len, reverse=True)
        _secrets_pattern = re.compile("|".join(re.escape(s) for s in longest_first))


def redact(text: str) -> str:
    """``text`` with URL credentials, credential parameters and headers, key shapes and the
    registered secrets masked."""
    if not text:
        return text
    pattern = _secrets_pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    for compiled, replacement in _PATTERNS:
        text = compiled.sub(replacement, text)
    return text


def redact_all(value: T) -> T:
    """:func:`redact` applied to every string in ``value`` (dicts, lists and tuples walked;
    keys kept)."""
    if isinstance(value, str):
        return redact(value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: redact_all(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list | tuple):
        return type(value)(redact_all(v) for v in value)
    return value

"""The one exception tree of ragloop.

Every exception ragloop raises on purpose derives from :class:`RagloopError`::

    RagloopError
    ├── ConfigError          (also a ValueError and a TypeError)  a setting is out of range, of
    │                        the wrong type or unknown (a mistyped option name); the message
    │                        names it. Every engine raises it for every bad setting.
    ├── ComponentError       a plugged-in component broke its contract (wrong return type, ...)
    ├── EmptyTraceError      (also a ValueError)  best_iteration of a run with no iteration
    ├── GroundingError       a grounder could not score an answer (an unreadable judge reply);
    │                        ``AgentLoop.ground`` logs it and leaves ``grounding`` unset
    ├── BudgetExceeded       a budget ran out inside a run; engines catch it and return a
    │                        partial result with its stop reason, so it never leaves run()
    ├── RetrievalLoopError   a RetrievalLoop caller callback (refine_query, should_continue)
    │                        raised; ``.iteration`` says after which iteration, the cause is
    │                        chained
    ├── TraceNotFound        no stored trace has the id asked for (or a prefix matches several)
    ├── TraceCorrupted       (also a ValueError)  a stored trace cannot be read back
    ├── StoreError           the store refused an operation (a corrupt file, a mismatched
    │   │                    embedding model, a schema from a newer ragloop, ...)
    │   ├── KnowledgeBaseNotFound   a read pointed at a knowledge base that does not exist
    │   ├── DenseSearchUnavailable  dense search asked for, but no usable embedder
    │   └── PostgresServerError     the temporary PostgreSQL server could not start
    ├── ReadError            a file could not be turned into text (malformed, empty, ...)
    ├── EmbedderUnavailable  the embedder's packages are not installed (names the extra)
    ├── DatasetError         an evaluation dataset is missing, malformed or unrecognised
    └── ModelError           a chat model could not produce a reply (also: requests forbidden,
        │                    no API key, server unreachable, a body that is not the wire format)
        ├── ModelHTTPError   the provider answered with an error status; ``.status``, ``.body``
        │   └── ContextOverflowError  the prompt (and room for the reply) exceeds the model's
        │                    context window; ``.prompt_tokens``, ``.context_window`` when known
        ├── ModelTimeout     (also a TimeoutError)  the provider did not answer in time
        └── ScriptExhausted  a scripted test model was called more often than it has replies

Exceptions raised *by* user components (a retriever that cannot reach its index, a generator
whose LLM times out) are not wrapped: with ``on_error="raise"`` they propagate unchanged, with a
note saying which step of which iteration raised them; with ``on_error="stop"`` the engine ends
the run with ``StopReason.ERROR`` and keeps the partial trace and the message.

Not an error: ``ragloop.IngestInterrupted`` is the ``KeyboardInterrupt`` of an interrupted
ingest, carrying the report of what was saved (it lives with the ingest report, in
``ragloop.kb.ingest.discover``).

Running out of budget is never an exception at the engine boundary: the engine returns its best
partial result with the matching ``StopReason``. ``AgentLoop`` goes further: it never raises
for a failing controller or tool either (a failing controller ends the run with
``StopReason.ERROR``; a failing tool becomes a tool-result message the controller reads).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ragloop.core.records import StopReason
from ragloop.core.redaction import redact


class RagloopError(Exception):
    """Base class of every error ragloop raises on purpose. Its message is redacted
    (:func:`ragloop.core.redaction.redact`): no credential in a URL or a reply reaches it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class ConfigError(RagloopError, ValueError, TypeError):
    """A setting is invalid: out of range, of the wrong type, or unknown. ``field`` names it.

    One error type for every engine and option; it is also a ``TypeError`` (what Python raises
    for an unexpected keyword argument) and a ``ValueError``, so code that caught either keeps
    working.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


def check_options(options: Mapping[str, object], known: Iterable[str], *, owner: str) -> None:
    """Raise :class:`ConfigError` for an option name ``owner`` does not take, with the nearest
    known name when there is one."""
    names = sorted(known)
    for name in options:
        if name not in names:
            import difflib  # only on the error path

            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; it takes {', '.join(names)}"
            raise ConfigError(name, f"{owner} has no option {name!r}{hint}")


def check_query(query: object) -> str:
    """The query a run was given, refused before any work when it is not a non-empty string."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("query must be a non-empty string")
    return query


class ComponentError(RagloopError):
    """A component (retriever, generator, evaluator, reformulator) broke its contract."""


class EmptyTraceError(RagloopError, ValueError):
    """The run finished no iteration, so it has no best iteration."""


class GroundingError(RagloopError):
    """A grounder could not score an answer (for example, its judge's reply was unreadable)."""


class BudgetExceeded(RagloopError):
    """A budget ran out inside a run. ``reason`` is the matching budget ``StopReason``."""

    def __init__(self, reason: StopReason) -> None:
        self.reason = reason
        super().__init__(f"budget exhausted: {reason.value}")


class RetrievalLoopError(RagloopError):
    """A caller callback of a RetrievalLoop run raised. ``iteration`` is the 0-based iteration
    it was called after; the callback's exception is the ``__cause__``."""

    def __init__(self, message: str, *, iteration: int) -> None:
        self.iteration = iteration
        super().__init__(f"{message} (after iteration {iteration})")


class TraceNotFound(RagloopError):
    """No stored trace has that id, or the prefix given matches several."""


class TraceCorrupted(RagloopError, ValueError):
    """A stored trace's row is not what ragloop wrote (bad JSON, wrong fields)."""


class ModelError(RagloopError):
    """A chat model failed to produce a reply.

    ``content`` is the part of the message that the server wrote (an excerpt of its reply):
    telemetry treats it as content, withheld unless content capture is on.
    """

    def __init__(self, message: str, *, content: str = "") -> None:
        self.content = redact(content)
        super().__init__(message)


class ModelHTTPError(ModelError):
    """A model provider answered with an HTTP error status (after any retries).

    ``status`` is the HTTP status, ``body`` an excerpt of the response body (the provider's error
    message is in it), ``url`` the request URL, and ``retry_after_s`` the wait the server asked
    for in ``Retry-After``, if it sent one.
    """

    def __init__(
        self,
        status: int,
        body: str,
        *,
        url: str = "",
        retry_after_s: float | None = None,
        hint: str = "",
    ) -> None:
        self.status = status
        self.body = redact(body)
        self.url = redact(url)
        self.retry_after_s = retry_after_s
        where = f" from {self.url}" if url else ""
        extra = f" ({hint})" if hint else ""
        super().__init__(
            f"HTTP {status}{where}{extra}: {self.body or '(empty body)'}", content=self.body
        )


class ContextOverflowError(ModelHTTPError):
    """The server refused a request whose prompt does not fit the model's context window.

    ``prompt_tokens`` and ``context_window`` are the sizes the server named (None when it named
    none). LLM components fit their prompts to the window they know and, told the real sizes
    by this error, fit once more; it reaches the loop (whose ``on_error`` applies) only when
    even the smallest prompt, the question with no evidence, does not fit.
    """

    def __init__(
        self,
        status: int,
        body: str,
        *,
        url: str = "",
        prompt_tokens: int | None = None,
        context_window: int | None = None,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.context_window = context_window
        sizes = (
            f"a prompt of {prompt_tokens} tokens" if prompt_tokens is not None else "the prompt"
        ) + (
            f" exceeds the context window of {context_window} tokens"
            if context_window is not None
            else " exceeds the model's context window"
        )
        super().__init__(status, body, url=url, hint=sizes)


class ModelTimeout(ModelError, TimeoutError):
    """A model provider did not answer within the request's timeout."""


class ScriptExhausted(ModelError):
    """A :class:`~ragloop.testing.ScriptedModel` ran out of scripted replies."""


class StoreError(RagloopError):
    """The store refused an operation (a corrupt file, a mismatched embedding model, ...)."""


class KnowledgeBaseNotFound(StoreError):
    """A read command pointed at a knowledge base that does not exist."""


class DenseSearchUnavailable(StoreError):
    """Dense search was asked for, but the knowledge base has no usable embedder."""


class PostgresServerError(StoreError):
    """The temporary server could not be set up or started (the message carries its log)."""


class ReadError(RagloopError):
    """A file could not be turned into text (malformed, empty, unsupported)."""


class EmbedderUnavailable(RagloopError):
    """The embedder's packages are not installed (the message says which extra to install)."""


class DatasetError(RagloopError):
    """A dataset file is missing, malformed, or in a format no loader recognises."""


WITHHELD = "[server reply withheld: content capture is off]"


def server_text(error: BaseException) -> list[str]:
    """What servers wrote in ``error`` and the errors it was raised from (their ``content``)."""
    found: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModelError) and current.content:
            found.append(current.content)
        current = current.__cause__ or current.__context__
    return found


def withhold(text: str, contents: list[str]) -> str:
    """``text`` with each of ``contents`` (servers' text, see :func:`server_text`) replaced."""
    for content in sorted(contents, key=len, reverse=True):
        text = text.replace(content, WITHHELD)
    return text

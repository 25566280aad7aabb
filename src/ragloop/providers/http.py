"""HTTP for the providers: one :class:`Connection` per model, retries, and ragloop's errors.

Every request goes through :meth:`Connection.post_json` or :meth:`Connection.post_sse` (and
their async twins), which:

1. refuse it when model requests are switched off (``ragloop.providers.ALLOW_MODEL_REQUESTS``);
2. retry it with tenacity on 408, 409, 429, 5xx and connection failures, with exponential
   backoff and jitter, or exactly the wait the server asks for in ``Retry-After`` /
   ``retry-after-ms``, bounded by :class:`RetryPolicy` in attempts and in total time; a wait
   that would outlast the run's wall-clock budget ends the run's budget instead
   (:class:`~ragloop.BudgetExceeded`) of sleeping through it;
3. turn what still fails into :class:`~ragloop.ModelHTTPError` (status and body excerpt),
   :class:`~ragloop.ModelTimeout` or :class:`~ragloop.ModelError`.

A read timeout is not retried: the timeout is the longest the caller wants to wait, and a retry
would double it. The sync methods keep one pooled ``httpx.Client`` per model. The async ones use
the ``httpx.AsyncClient`` given to the model, or else one per call: an async client cannot
outlive the event loop it first ran on, and ``run()`` gives every run a fresh loop.

Bounds on what a server can make a call cost:

- **time**: httpx's timeouts apply to each network read, so a server that trickles its body
  would never time out; here a whole reply must arrive within the read timeout (``timeout=5``:
  five seconds for the reply, checked as each piece arrives, so at most one more read timeout
  when the server then stalls), and a whole stream within ``stream_timeout_s`` (600 s);
- **size**: a reply over ``max_reply_bytes`` (32 MiB, decoded) is refused with
  :class:`~ragloop.ModelError`, and of an error reply only the first 64 KiB are read;
- **spend**: a connection that drops while the reply is being read is not retried (the server
  has answered, so it has probably billed the call), unless
  ``RetryPolicy(retry_dropped_replies=True)``. A connection that fails before any answer is
  retried; in the rare case where the server had processed the request anyway, that call is
  billed twice.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import logging
import ssl
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
    wait_random,
)
from tenacity.stop import stop_base

from ragloop.core.budget import remaining_wall_s
from ragloop.core.errors import (
    BudgetExceeded,
    ConfigError,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    server_text,
    withhold,
)
from ragloop.core.records import StopReason
from ragloop.core.redaction import redact, register_secret
from ragloop.observability.settings import trace_content_enabled
from ragloop.providers.endpoints import Endpoint, check_allowed

logger = logging.getLogger("ragloop.providers")

DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
DEFAULT_STREAM_TIMEOUT_S = 600.0
DEFAULT_MAX_REPLY_BYTES = 32 * 1024 * 1024
ERROR_BODY_BYTES = 64 * 1024
RETRYABLE_STATUS = frozenset({408, 409, 429})
BODY_EXCERPT_CHARS = 500

# Connection-level failures: the request may not have reached the server, or the connection broke
# before an answer; retrying is safe. Read and write timeouts are not here (see the docstring).
_RETRYABLE_TRANSPORT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)

# Module attributes, read at each request, so tests can record the waits instead of sleeping.
_sleep = time.sleep
_asleep = asyncio.sleep


@dataclass(frozen=True)
class RetryPolicy:
    """How a provider retries: at most ``max_attempts`` attempts (1 disables retries), and no
    retry whose wait would end more than ``max_total_s`` after the first attempt started.
    Backoff waits ``initial_backoff_s * 2**n`` (capped at ``max_backoff_s``) plus up to
    ``jitter_s`` at random; a server's ``Retry-After`` replaces the backoff.
    ``retry_dropped_replies`` retries a call whose connection dropped while the reply was
    being read, which may bill it twice (off by default)."""

    max_attempts: int = 4
    max_total_s: float = 60.0
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    jitter_s: float = 0.5
    retry_dropped_replies: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.max_attempts, int) and self.max_attempts >= 1):
            raise ConfigError("max_attempts", f"must be an integer >= 1, got {self.max_attempts!r}")
        for name in ("max_total_s", "initial_backoff_s", "max_backoff_s", "jitter_s"):
            value = getattr(self, name)
            if not value >= 0:  # also rejects NaN
                raise ConfigError(name, f"must be >= 0, got {value!r}")


# -- errors -----------------------------------------------------------------------------------


def excerpt(text: str, limit: int = BODY_EXCERPT_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def retry_after_seconds(headers: httpx.Headers, now: datetime | None = None) -> float | None:
    """The wait a server asks for: ``retry-after-ms``, or ``Retry-After`` in seconds or as an
    HTTP date. None when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def http_error(request: httpx.Request, response: httpx.Response) -> ModelHTTPError:
    sent_key = "authorization" in request.headers or "x-api-key" in request.headers
    hint = "no API key was sent" if response.status_code in (401, 403) and not sent_key else ""
    return ModelHTTPError(
        response.status_code,
        excerpt(response.text),
        url=str(request.url),
        retry_after_s=retry_after_seconds(response.headers),
        hint=hint,
    )


def _transport_error(request: httpx.Request, error: httpx.TransportError) -> ModelError:
    if isinstance(error, httpx.TimeoutException):
        return ModelTimeout(f"{request.method} {request.url} timed out ({type(error).__name__})")
    return ModelError(f"could not reach {request.url}: {type(error).__name__}: {error}")


def _with_body(response: httpx.Response, body: bytes) -> httpx.Response:
    """A copy of ``response`` holding ``body`` (already decoded: no content-encoding)."""
    dropped = {"content-encoding", "content-length", "transfer-encoding"}
    headers = [(k, v) for k, v in response.headers.items() if k.lower() not in dropped]
    return httpx.Response(
        response.status_code, headers=headers, content=body, request=response.request
    )


def _malformed(url: httpx.URL, what: str, body: str) -> ModelError:
    shown = excerpt(body)
    return ModelError(f"{url} returned {what}: {shown or '(empty body)'}", content=shown)


def json_body(response: httpx.Response) -> Any:
    """The JSON body of a successful response (the protocol envelope, not model text)."""
    try:
        return json.loads(response.content)
    except ValueError:
        raise _malformed(response.request.url, "a body that is not JSON", response.text) from None
    except RecursionError:  # JSON nested deeper than Python's stack: a broken reply, not ours
        raise _malformed(
            response.request.url, "JSON nested too deeply to read", response.text
        ) from None


class _Limits:
    """Ends the call when a reply is too slow (past ``deadline``) or too large."""

    def __init__(self, request: httpx.Request, deadline: float | None, limit: int) -> None:
        self.request = request
        self.deadline = deadline
        self.limit = limit
        self.size = 0

    def check(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            raise ModelError(
                f"{self.request.url} sent a reply over {self.limit:,} bytes; refused "
                "(the connection's max_reply_bytes)"
            )
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ModelTimeout(
                f"{self.request.method} {self.request.url} timed out (the whole reply did not "
                "arrive in time)"
            )


class _BoundedStream(httpx.SyncByteStream):
    def __init__(self, stream: httpx.SyncByteStream, limits: _Limits) -> None:
        self.stream = stream
        self.limits = limits

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.stream:
            self.limits.check(chunk)
            yield chunk

    def close(self) -> None:
        self.stream.close()


class _AsyncBoundedStream(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, limits: _Limits) -> None:
        self.stream = stream
        self.limits = limits

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            self.limits.check(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.stream.aclose()


def _bound(response: httpx.Response, deadline: float | None, limit: int) -> None:
    """Make reading ``response`` raise past ``deadline`` or ``limit`` bytes (as received)."""
    limits = _Limits(response.request, deadline, limit)
    if isinstance(response.stream, httpx.SyncByteStream):
        response.stream = _BoundedStream(response.stream, limits)
    elif isinstance(response.stream, httpx.AsyncByteStream):
        response.stream = _AsyncBoundedStream(response.stream, limits)


def _decoded_limit(response: httpx.Response, limit: int) -> None:
    if len(response.content) > limit:  # a compressed reply may grow past the cap when decoded
        raise ModelError(
            f"{response.request.url} sent a reply over {limit:,} bytes; refused "
            "(the connection's max_reply_bytes)"
        )


def _dropped(request: httpx.Request, error: httpx.TransportError) -> ModelError:
    return ModelError(
        f"the connection to {request.url} dropped while its reply was being read "
        f"({type(error).__name__}: {error}); not retried, since the server may have billed the "
        "call: RetryPolicy(retry_dropped_replies=True) retries it"
    )


# -- retries ----------------------------------------------------------------------------------


def _is_retryable(error: BaseException) -> bool:
    if isinstance(error, ModelHTTPError):
        return error.status in RETRYABLE_STATUS or error.status >= 500
    return isinstance(error, _RETRYABLE_TRANSPORT)


def _wait(policy: RetryPolicy) -> Any:
    backoff = wait_exponential(
        multiplier=policy.initial_backoff_s, max=policy.max_backoff_s
    ) + wait_random(0, policy.jitter_s)

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, ModelHTTPError) and error.retry_after_s is not None:
            return error.retry_after_s
        return float(backoff(state))

    return wait


class _WithinWallBudget(stop_base):
    """A tenacity stop that never stops, but raises BudgetExceeded when the wait before the next
    attempt would outlast the wall-clock budget of the run in progress."""

    def __call__(self, state: RetryCallState) -> bool:
        remaining = remaining_wall_s()
        if remaining is not None and state.upcoming_sleep >= remaining:
            error = state.outcome.exception() if state.outcome else None
            stop = BudgetExceeded(StopReason.BUDGET_WALL_MS)
            stop.add_note(
                f"ragloop: not retrying {error!r}: waiting {state.upcoming_sleep:.2f} s would "
                f"pass the run's wall-clock budget ({remaining:.2f} s left)"
            )
            raise stop from error
        return False


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    shown = redact(str(error))
    if error is not None and not trace_content_enabled():  # a reply's text is content
        shown = withhold(shown, server_text(error))
    logger.info(
        "retrying a model request in %.2f s after attempt %d failed: %s",
        state.upcoming_sleep,
        state.attempt_number,
        shown,
    )


def _retry_options(policy: RetryPolicy) -> dict[str, Any]:
    return {
        "retry": retry_if_exception(_is_retryable),
        "wait": _wait(policy),
        # evaluated in order; the budget check comes last so an exhausted policy raises the
        # provider's error rather than a budget stop
        "stop": stop_after_attempt(policy.max_attempts)
        | stop_before_delay(policy.max_total_s)
        | _WithinWallBudget(),
        "before_sleep": _log_retry,
        "reraise": True,
    }


# -- the connection ---------------------------------------------------------------------------


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle takes tens of milliseconds; every client ragloop makes shares one.
    return httpx.create_ssl_context()


class Connection:
    """Posts JSON to one provider's base URL with fixed headers; see the module docstring."""

    def __init__(
        self,
        endpoint: Endpoint,
        headers: dict[str, str],
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        stream_timeout_s: float | None = DEFAULT_STREAM_TIMEOUT_S,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        if stream_timeout_s is not None and not stream_timeout_s > 0:
            raise ConfigError("stream_timeout", f"must be > 0 or None, got {stream_timeout_s!r}")
        if not (isinstance(max_reply_bytes, int) and max_reply_bytes > 0):
            raise ConfigError("max_reply_bytes", f"must be an integer > 0, got {max_reply_bytes!r}")
        if http_client is not None and not isinstance(
            http_client, httpx.Client | httpx.AsyncClient
        ):
            raise ConfigError(
                "http_client",
                f"must be an httpx.Client or httpx.AsyncClient, got {type(http_client).__name__}",
            )
        self.base_url = endpoint.base_url
        register_secret(endpoint.api_key)  # masked wherever a server echoes it
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.retry = retry or RetryPolicy()
        self.stream_timeout_s = stream_timeout_s
        self.max_reply_bytes = max_reply_bytes
        self._headers = headers
        # The public APIs refuse keyless requests; say why no key was sent without asking them.
        self._missing_key = (
            endpoint.no_key_reason if endpoint.is_public_api and not endpoint.api_key else ""
        )
        self._given_client = http_client
        self._own_client: httpx.Client | None = None
        self._lock = threading.Lock()

    # -- clients -----------------------------------------------------------------------------
    def _client(self) -> httpx.Client:
        if isinstance(self._given_client, httpx.Client):
            return self._given_client
        with self._lock:
            if self._own_client is None:
                self._own_client = httpx.Client(timeout=self.timeout, verify=_ssl_context())
                # closes the pool when the model is dropped or at exit, without a __del__
                weakref.finalize(self, self._own_client.close)
            return self._own_client

    @asynccontextmanager
    async def _async_client(self) -> AsyncIterator[httpx.AsyncClient]:
        if isinstance(self._given_client, httpx.AsyncClient):
            yield self._given_client
            return
        async with httpx.AsyncClient(timeout=self.timeout, verify=_ssl_context()) as client:
            yield client

    def close(self) -> None:
        """Close the pooled sync client this connection made (never a client it was given)."""
        with self._lock:
            if self._own_client is not None:
                self._own_client.close()
                self._own_client = None

    # -- requests ----------------------------------------------------------------------------
    def _request(
        self, client: httpx.Client | httpx.AsyncClient, path: str, payload: Any
    ) -> httpx.Request:
        request = client.build_request(
            "POST", self.base_url + path, json=payload, headers=self._headers, timeout=self.timeout
        )
        if self._missing_key:
            raise ModelError(f"refused to send a request to {request.url}: {self._missing_key}")
        check_allowed(request.url)
        return request

    def _deadline(self, *, stream: bool) -> float | None:
        """When the attempt starting now must have its whole reply (or stream)."""
        total = self.stream_timeout_s if stream else self.timeout.read
        return None if total is None else time.monotonic() + total

    def _error_body(self, response: httpx.Response) -> httpx.Response:
        """The error response with the first ERROR_BODY_BYTES of its body (no more is read)."""
        body = b""
        try:
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) >= ERROR_BODY_BYTES:
                    break
        except (httpx.TransportError, ModelError):
            pass  # the status says what failed; a body cut short is still an excerpt
        finally:
            response.close()
        return _with_body(response, body[:ERROR_BODY_BYTES])

    async def _aerror_body(self, response: httpx.Response) -> httpx.Response:
        body = b""
        try:
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) >= ERROR_BODY_BYTES:
                    break
        except (httpx.TransportError, ModelError):
            pass
        finally:
            await response.aclose()
        return _with_body(response, body[:ERROR_BODY_BYTES])

    def _send(self, path: str, payload: Any, *, stream: bool) -> httpx.Response:
        client = self._client()
        request = self._request(client, path, payload)
        response: httpx.Response | None = None
        try:
            for attempt in Retrying(sleep=_sleep, **_retry_options(self.retry)):
                with attempt:
                    deadline = self._deadline(stream=stream)
                    response = client.send(request, stream=True)
                    _bound(response, deadline, self.max_reply_bytes)
                    if not response.is_success:
                        raise http_error(request, self._error_body(response))
                    if not stream:
                        try:
                            response.read()
                        except httpx.TransportError as error:
                            if self.retry.retry_dropped_replies:
                                raise
                            raise _dropped(request, error) from error
                        finally:
                            response.close()
                        _decoded_limit(response, self.max_reply_bytes)
        except httpx.TransportError as error:
            raise _transport_error(request, error) from error
        assert response is not None  # tenacity returns only after a successful attempt
        return response

    async def _asend(
        self, client: httpx.AsyncClient, path: str, payload: Any, *, stream: bool
    ) -> httpx.Response:
        request = self._request(client, path, payload)
        response: httpx.Response | None = None
        try:
            async for attempt in AsyncRetrying(sleep=_asleep, **_retry_options(self.retry)):
                with attempt:
                    deadline = self._deadline(stream=stream)
                    response = await client.send(request, stream=True)
                    _bound(response, deadline, self.max_reply_bytes)
                    if not response.is_success:
                        raise http_error(request, await self._aerror_body(response))
                    if not stream:
                        try:
                            await response.aread()
                        except httpx.TransportError as error:
                            if self.retry.retry_dropped_replies:
                                raise
                            raise _dropped(request, error) from error
                        finally:
                            await response.aclose()
                        _decoded_limit(response, self.max_reply_bytes)
        except httpx.TransportError as error:
            raise _transport_error(request, error) from error
        assert response is not None
        return response

    def post_json(self, path: str, payload: Any) -> Any:
        return json_body(self._send(path, payload, stream=False))

    async def apost_json(self, path: str, payload: Any) -> Any:
        async with self._async_client() as client:
            return json_body(await self._asend(client, path, payload, stream=False))

    def post_sse(self, path: str, payload: Any) -> Iterator[ServerSentEvent]:
        """The server-sent events of a streamed response, as they arrive."""
        response = self._send(path, payload, stream=True)
        try:
            yield from EventSource(response).iter_sse()
        except SSEError as error:
            raise _malformed(response.request.url, "no event stream", str(error)) from None
        except httpx.TransportError as error:
            raise _transport_error(response.request, error) from error
        finally:
            response.close()

    async def apost_sse(self, path: str, payload: Any) -> AsyncIterator[ServerSentEvent]:
        async with self._async_client() as client:
            response = await self._asend(client, path, payload, stream=True)
            try:
                async for event in EventSource(response).aiter_sse():
                    yield event
            except SSEError as error:
                raise _malformed(response.request.url, "no event stream", str(error)) from None
            except httpx.TransportError as error:
                raise _transport_error(response.request, error) from error
            finally:
                await response.aclose()

    # -- metadata -----------------------------------------------------------------------------
    def _get_request(self, client: httpx.Client | httpx.AsyncClient, url: str) -> httpx.Request:
        request = client.build_request("GET", url, headers=self._headers, timeout=self.timeout)
        check_allowed(request.url)
        return request

    def get_json(self, url: str) -> Any:
        """GET ``url`` once, without retries (for metadata a server may not offer, such as its
        context window); raises :class:`~ragloop.ModelError` on any failure."""
        client = self._client()
        request = self._get_request(client, url)
        try:
            response = client.send(request)
        except httpx.TransportError as error:
            raise _transport_error(request, error) from error
        if not response.is_success:
            raise http_error(request, response)
        return json_body(response)

    async def aget_json(self, url: str) -> Any:
        """:meth:`get_json` for async code."""
        async with self._async_client() as client:
            request = self._get_request(client, url)
            try:
                response = await client.send(request)
            except httpx.TransportError as error:
                raise _transport_error(request, error) from error
            if not response.is_success:
                raise http_error(request, response)
            return json_body(response)

"""One map from an error to the HTTP status the server answers with, used by every route (JSON,
server-sent events, the OpenAI-compatible routes and their stream).

=========================================================  ======  =========================
what failed                                                status  OpenAI ``code``
=========================================================  ======  =========================
a refused request (:class:`AccessDenied`: its own status)  4xx     (by status)
bad input: a request's ``ConfigError`` / ``ValidationError``,
an unreadable upload, dense search on a keyword-only base   422     ``invalid_request``
a stored run that does not exist                           404     ``not_found``
the model did not answer in time, or the run's deadline    504     ``timeout``
the model is unreachable or failed (``ModelError``), or a
component of the run broke (any other ``RagloopError``)    502     ``model_error``
the knowledge base (store) or the embedder is unavailable  503     ``store_unavailable``
the server's own configuration is invalid for the engine   503     ``server_misconfigured``
=========================================================  ======  =========================

An error's causes count: a component error raised *from* a model error is the model's (502).
Anything else is left to the app's last-resort handler. On ``/v1/chat/completions`` and
``/v1/models`` the body is OpenAI's ``{"error": {"message", "type", "param", "code"}}``
(request validation there is a 400 naming the ``param``, as OpenAI answers), elsewhere
``{"detail": message}``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from ragloop.core.errors import (
    ConfigError,
    DenseSearchUnavailable,
    EmbedderUnavailable,
    ModelError,
    ModelTimeout,
    RagloopError,
    ReadError,
    StoreError,
    TraceNotFound,
)
from ragloop.server.access import AccessDenied

OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")


class Refusal(AccessDenied):
    """A refused request with the short ``code`` OpenAI clients read (``model_not_found``)."""

    def __init__(self, status: int, message: str, *, code: str) -> None:
        super().__init__(status, message)
        self.code = code


class ServerMisconfigured(Refusal):
    """The server's own configuration cannot build what a request needs (503: not the
    caller's fault, and not fixed by retrying until the operator fixes ragloop.toml)."""

    def __init__(self, error: ConfigError) -> None:
        message = f"the server's configuration is invalid ({error}); fix ragloop.toml"
        super().__init__(503, message, code="server_misconfigured")


@dataclass(frozen=True)
class Problem:
    """What the server answers for an error: status, message, a short code."""

    status: int
    message: str
    code: str
    kind: str = ""
    headers: dict[str, str] = field(default_factory=dict)


# most specific first; an error matches the first row any error of its cause chain matches
_TABLE: tuple[tuple[type[BaseException], int, str, str], ...] = (
    (ModelTimeout, 504, "timeout", "the model did not answer in time"),
    (ModelError, 502, "model_error", "the model failed"),
    (DenseSearchUnavailable, 422, "invalid_request", ""),
    (StoreError, 503, "store_unavailable", "the knowledge base is unavailable"),
    (EmbedderUnavailable, 503, "store_unavailable", "the embedder is unavailable"),
    (TraceNotFound, 404, "not_found", ""),
    (ConfigError, 422, "invalid_request", ""),
    (ValidationError, 422, "invalid_request", ""),
    (ReadError, 422, "invalid_request", ""),
    (TimeoutError, 504, "timeout", "the run did not end within the server's deadline"),
    (RagloopError, 502, "model_error", "the run failed"),
)


def _chain(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in found):
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def problem_of(error: BaseException) -> Problem | None:
    """The status and message for ``error``; None for an error the map does not know."""
    if isinstance(error, AccessDenied):
        headers = getattr(error, "headers", None) or {}
        code = getattr(error, "code", None) or _code_of(error.status)
        return Problem(error.status, error.message, code, type(error).__name__, dict(headers))
    chain = _chain(error)
    for kind, status, code, prefix in _TABLE:
        cause = next((e for e in chain if isinstance(e, kind)), None)
        if cause is None:
            continue
        text = str(cause) or str(error) or type(cause).__name__
        if kind is TimeoutError and not isinstance(cause, RagloopError):
            text = ""  # asyncio's TimeoutError says nothing
        message = f"{prefix}: {text}" if prefix and text else prefix or text
        return Problem(status, message, code, type(cause).__name__)
    return None


def sentence_of(error: ValidationError) -> str:
    """A validation error as one sentence naming the field: ``top_k: input should be less
    than or equal to 50, not 500`` (and how many more problems there are), never pydantic's
    report with its URL."""
    problems = []
    for found in error.errors(include_url=False):
        where = ".".join(str(p) for p in found.get("loc", ())) or "arguments"
        message = str(found.get("msg", "is not valid"))
        if found.get("type") == "missing":
            problems.append(f"{where}: missing; give it")
            continue
        shown = repr(found.get("input"))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        problems.append(f"{where}: {message[:1].lower()}{message[1:]}, not {shown}")
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{problems[0] if problems else 'the arguments are not valid'}{more}"


def _code_of(status: int) -> str:
    return {
        401: "invalid_api_key",
        403: "forbidden",
        404: "not_found",
        413: "too_large",
        429: "rate_limit_exceeded",
    }.get(status, "invalid_request" if status < 500 else "server_error")


def openai_type(status: int) -> str:
    """The ``type`` OpenAI gives an error of this status."""
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    return "invalid_request_error" if status < 500 else "server_error"


def openai_error(problem: Problem, *, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": problem.message,
            "type": openai_type(problem.status),
            "param": param,
            "code": problem.code,
        }
    }


def is_openai(request: Request) -> bool:
    return request.url.path.rstrip("/") in OPENAI_PATHS


def respond(request: Request, problem: Problem, *, param: str | None = None) -> JSONResponse:
    body = openai_error(problem, param=param) if is_openai(request) else {"detail": problem.message}
    return JSONResponse(body, status_code=problem.status, headers=problem.headers or None)


def refusal(request: Request, denied: AccessDenied) -> JSONResponse:
    """The response to a refused request, in its route's format (OpenAI's on its routes)."""
    problem = problem_of(denied)
    assert problem is not None  # every AccessDenied is one
    return respond(request, problem)


def install(app: FastAPI) -> None:
    """Answer every error the map knows with its status, in the route's format. Call it after
    the app's own handlers: a refused request's ``headers`` (``WWW-Authenticate``,
    ``Retry-After``) are kept, and outside the OpenAI routes a body that does not validate goes
    to the handler the app had for it."""

    async def known(request: Request, error: Exception) -> Response:
        problem = problem_of(error)
        if problem is None:  # pragma: no cover - only registered for known types
            raise error
        return respond(request, problem)

    for kind in (AccessDenied, RagloopError, TimeoutError, ValidationError):
        app.add_exception_handler(kind, known)

    # the other routes keep the handler the app has for a body that does not validate
    previous = app.exception_handlers.get(
        RequestValidationError, request_validation_exception_handler
    )

    async def invalid(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        if not is_openai(request):
            answer = previous(request, error)
            return await answer if inspect.isawaitable(answer) else answer
        first = error.errors()[0] if error.errors() else {}
        where = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(where) or None
        message = f"{param or 'body'}: {first.get('msg', 'invalid request')}"
        return respond(request, Problem(400, message, "invalid_request"), param=param)

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        if not is_openai(request):
            return await http_exception_handler(request, error)
        code = _code_of(error.status_code)
        headers = dict(error.headers or {})
        return respond(request, Problem(error.status_code, str(error.detail), code, "", headers))

    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)

"""Who may do what: API keys (stored hashed), their collections, admin rights and concurrency.

A request names its key as ``Authorization: Bearer <key>`` (or ``X-API-Key: <key>``); the key's
hash is looked up among ``[server.keys.*]``. A key limited to collections gets engines and
searches built over those collections only, so the limit is part of the store's query, never a
filter applied afterwards. With no key configured the server is local-only: requests from
loopback addresses act as an administrator, any other is refused, and :class:`LocalGuard`
keeps other web pages out (a loopback ``Host`` only, state-changing requests from the server's
own origin only), since a browser on this machine is on loopback too.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragloop.config import KeySettings, ServerSettings, hash_key
from ragloop.core.errors import ConfigError
from ragloop.server.slots import ProcessSlots, Slot, Slots


class AccessDenied(Exception):
    """A request may not do what it asks; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def headers(self) -> dict[str, str]:
        """What HTTP says goes with the status: how to authenticate (401), when to retry
        (429: a run takes seconds; one second is when a slot may have freed)."""
        if self.status == 401:
            return {"WWW-Authenticate": 'Bearer realm="ragloop"'}
        if self.status == 429:
            return {"Retry-After": "1"}
        return {}

    def response(self) -> JSONResponse:
        return JSONResponse({"detail": self.message}, status_code=self.status, headers=self.headers)


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the key's name (``local`` without keys), the collections it may
    read (None: all), whether it may add and delete documents, how many runs it may have."""

    name: str
    collections: tuple[str, ...] | None
    admin: bool
    max_concurrency: int

    def scope(self, requested: str | Sequence[str] | None) -> tuple[str, ...] | None:
        """The collections a request may search: those it names (all when it names none),
        within the key's own; naming one the key may not read is refused."""
        if requested is None:
            return self.collections
        names = (requested,) if isinstance(requested, str) else tuple(requested)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise AccessDenied(422, "collection: give collection names")
        if self.collections is not None:
            outside = [n for n in names if n not in self.collections]
            if outside:
                raise AccessDenied(403, f"this key may not read collection {outside[0]!r}")
        return tuple(dict.fromkeys(names))

    def may_read(self, collection: object) -> bool:
        return self.collections is None or collection in self.collections

    def require_admin(self) -> None:
        if not self.admin:
            raise AccessDenied(403, "only an admin key may add or delete documents")

    def writable(self, collection: str | None) -> tuple[str, ...] | None:
        """The collections a write or delete may touch: ``collection`` (None: every
        collection the key may read, all of them for a key without a limit). Only an admin
        key writes, and only inside its own collections."""
        self.require_admin()
        if collection is None:
            return self.collections
        if not self.may_read(collection):
            raise AccessDenied(403, f"this key may not change collection {collection!r}")
        return (collection,)

    def may_read_run(self, meta: Mapping[str, Any]) -> bool:
        """Whether the caller may read a stored run: one it asked (an admin: any key's), over
        collections it may read. A run records the collections it searched (none recorded:
        every collection, which only a key without a limit may read)."""
        if not self.admin and meta.get("key") != self.name:
            return False
        if self.collections is None:
            return True
        searched = meta.get("collections")
        return isinstance(searched, list) and all(self.may_read(c) for c in searched)


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_cors(settings: ServerSettings) -> None:
    """Refuse to serve a keyless server to every web page: ``cors_origins = ["*"]`` without
    keys would let any site a user of this machine visits read its documents (the browser is
    on loopback too)."""
    if "*" in settings.cors_origins and not settings.keys:
        raise ConfigError(
            "server.cors_origins",
            '["*"] lets any web page read this server, which has no API keys; add a key '
            "(ragloop config new-key NAME) or name the origins that may call it",
        )


class AccessControl:
    """Turns a request's key (or its absence) into a :class:`Caller`, and limits how many runs
    each caller has at once: counted by ``slots`` (:mod:`ragloop.server.slots`; this process's
    runs unless given)."""

    def __init__(self, settings: ServerSettings, slots: Slots | None = None) -> None:
        self.settings = settings
        self.by_hash: dict[str, tuple[str, KeySettings]] = {
            key.hash: (name, key) for name, key in settings.keys.items()
        }
        self.slots: Slots = slots if slots is not None else ProcessSlots()

    @property
    def local_only(self) -> bool:
        return not self.by_hash

    def local_caller(self) -> Caller:
        """The user of this machine (no keys, or MCP over stdio): reads and writes all."""
        return Caller("local", None, True, self.settings.max_concurrency_per_key)

    def caller(self, key: str | None, client_host: str | None) -> Caller:
        if self.local_only:
            if not is_loopback(client_host):
                raise AccessDenied(
                    403,
                    "this server has no API keys and answers requests from its own machine "
                    "only; add keys to ragloop.toml ([server.keys.NAME]) to serve others",
                )
            return self.local_caller()
        if not key:
            raise AccessDenied(401, "give an API key: Authorization: Bearer <key>")
        found = self.by_hash.get(hash_key(key))
        if found is None:
            raise AccessDenied(401, "unknown API key")
        name, settings = found
        collections = tuple(settings.collections) if settings.collections is not None else None
        limit = settings.max_concurrency or self.settings.max_concurrency_per_key
        return Caller(name, collections, settings.admin, limit)

    async def enter(self, caller: Caller) -> Slot:
        """A slot for a run of ``caller`` (give it back with :meth:`leave`); refused (429)
        when it has its limit running already (on every server, when they share a count)."""
        slot = await self.slots.take(caller.name, caller.max_concurrency)
        if slot is None:
            where = " on the servers of this knowledge base" if self.shared else ""
            raise AccessDenied(
                429,
                f"this key has {caller.max_concurrency} requests running{where}, its limit; "
                "retry when one ends",
            )
        return slot

    def leave(self, slot: Slot) -> None:
        self.slots.give(slot)

    @property
    def shared(self) -> bool:
        """Whether the runs are counted across servers, not in this process only."""
        return self.slots.shared != "process"

    def running(self, name: str) -> int:
        """The runs of key ``name`` in this process."""
        return self.slots.running(name)

    def name_of(self, key: str | None) -> str:
        """The name of the key a request gives, for the access log: ``local`` without keys,
        ``-`` with none given, ``unknown`` for one not configured (never the key itself)."""
        if self.local_only:
            return "local"
        if not key:
            return "-"
        found = self.by_hash.get(hash_key(key))
        return found[0] if found is not None else "unknown"


def key_of(authorization: str | None, api_key: str | None) -> str | None:
    """The key a request gives: ``Authorization: Bearer <key>``, else ``X-API-Key``."""
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return api_key.strip() if api_key and api_key.strip() else None


# declared as security schemes, so the OpenAPI page has an "Authorize" button for either
bearer_scheme = HTTPBearer(
    auto_error=False, description="An API key: `Authorization: Bearer <key>`."
)
api_key_scheme = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="An API key, as the header X-API-Key."
)


def caller_of(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)] = None,
    x_api_key: Annotated[str | None, Depends(api_key_scheme)] = None,
) -> Caller:
    """The caller of an HTTP request (a FastAPI dependency; the app's ``state.service`` holds
    the access control)."""
    access: AccessControl = request.app.state.service.access
    client = request.client.host if request.client else None
    given = f"Bearer {bearer.credentials}" if bearer is not None else None
    return access.caller(key_of(given, x_api_key), client)


CallerDep = Annotated[Caller, Depends(caller_of)]


class KeyGate:
    """ASGI middleware for a server with keys: a request to the API (``/v1/...``) with no key
    or an unknown one is answered 401 before its body is read, so a client that sends none
    (or sends it slowly, or waits for ``100 Continue``) costs the server nothing. The route
    still reads its caller (the key's collections and rights) as before; ``refuse`` makes the
    response, in the route's error format."""

    def __init__(
        self,
        app: ASGIApp,
        access: AccessControl,
        refuse: Callable[[Request, AccessDenied], Response],
    ) -> None:
        self.app = app
        self.access = access
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and not self.access.local_only
            and str(scope.get("path", "")).startswith("/v1/")
        ):
            headers = Headers(scope=scope)
            key = key_of(headers.get("authorization"), headers.get("x-api-key"))
            client = scope.get("client")
            try:
                self.access.caller(key, client[0] if client else None)
            except AccessDenied as denied:
                await self.refuse(Request(scope), denied)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class KeyCheck:
    """ASGI middleware for MCP served alone (``ragloop mcp --transport http``): refuses a
    request whose key is missing or unknown (401), or that comes from another machine when the
    server has no keys (403), before any MCP session starts."""

    def __init__(self, app: ASGIApp, access: AccessControl) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            client = scope.get("client")
            try:
                self.access.caller(
                    key_of(headers.get("authorization"), headers.get("x-api-key")),
                    client[0] if client else None,
                )
            except AccessDenied as error:
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


# -- keyless: this machine and this origin only -------------------------------------------------

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _origin(url: str, default_scheme: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of a URL or of a ``Host`` value (``//`` prepended), or None when
    it is not one."""
    try:
        parts = urlsplit(url if "//" in url else f"//{url}", scheme=default_scheme)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    scheme = parts.scheme.lower()
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS.get(scheme)


class LocalGuard:
    """ASGI middleware for a server without keys (with keys, keys decide and it lets all
    through). A browser on this machine reaches loopback too, so without it any web page could
    write to the server (a ``no-cors`` form post needs no CORS permission) and a name rebound to
    127.0.0.1 could read it. It refuses:

    - a ``Host`` that is not a loopback name or address, nor the address the connection came
      to (421: DNS rebinding);
    - a state-changing request (any method but GET, HEAD, OPTIONS) whose ``Origin`` (or, with
      none, ``Referer``) is not this server's own origin nor one of ``[server] cors_origins``
      (403: cross-site request forgery). A request with neither header comes from a program,
      not a page, and passes.

    One guard for the whole app, ``/mcp`` included (the MCP SDK's own check is switched off)."""

    def __init__(self, app: ASGIApp, access: AccessControl) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self.access.local_only:
            refused = self.refusal(scope)
            if refused is not None:
                await AccessDenied(*refused).response()(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = Headers(scope=scope)
        scheme = str(scope.get("scheme") or "http")
        own = _origin(headers.get("host", ""), scheme)
        server = scope.get("server")
        if own is None or not (is_loopback(own[1].strip("[]")) or own[1] == (server or ("",))[0]):
            return 421, (
                f"this server has no API keys and answers for its loopback address only, not "
                f"for Host {headers.get('host', '')!r}; open it as http://127.0.0.1:PORT/ "
                "(or add keys to ragloop.toml)"
            )
        if scope.get("method", "GET") in SAFE_METHODS:
            return None
        claimed = headers.get("origin") or headers.get("referer")
        if claimed is None:
            return None
        allowed = {own, *(_origin(o, scheme) for o in self.access.settings.cors_origins)}
        if _origin(claimed, scheme) not in allowed:
            return 403, (
                f"this server has no API keys and takes changes from its own page only, not from "
                f"{claimed!r}; add keys to ragloop.toml ([server.keys.NAME]) to serve other sites"
            )
        return None


# -- the access log -------------------------------------------------------------------------------

access_logger = logging.getLogger("ragloop.access")


class AccessLog:
    """ASGI middleware that logs one line per HTTP request to ``ragloop.access`` once its
    response has been sent (a stream: once it ends): method, path (no query string: it may
    hold a document's name), status, milliseconds and the key's name (:meth:`AccessControl.
    name_of`), never the key. ``ragloop serve`` shows the lines on stderr unless ``[server]
    access_log = false``."""

    def __init__(self, app: ASGIApp, access: AccessControl) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers for an app that raised before it answered

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            headers = Headers(scope=scope)
            name = self.access.name_of(
                key_of(headers.get("authorization"), headers.get("x-api-key"))
            )
            elapsed = (time.perf_counter() - started) * 1000
            access_logger.info(
                "%s %s %d %.0f ms key=%s",
                scope.get("method"),
                scope.get("path"),
                status,
                elapsed,
                name,
            )

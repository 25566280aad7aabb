"""One config file, ``ragloop.toml``, and the environment: the one place settings become objects.

Where the file is: the path given with ``--config`` (:func:`use_config_file`), else
``$RAGLOOP_CONFIG``, else ``ragloop.toml`` in the working directory when there is one; with none
of them, every setting has its default. The environment overrides the file: a variable
``RAGLOOP_<SECTION>__<KEY>`` (``RAGLOOP_SERVER__PORT=9000``, ``RAGLOOP_ENGINE__DEFAULT=agent``,
deeper levels with more ``__``) sets that key, its value read as a TOML value when it is one
(numbers, booleans, ``["a", "b"]``) and as text otherwise; ``RAGLOOP_KB`` is the knowledge
base's location, as it always was. A bad value is one :class:`~ragloop.ConfigError` naming the
key and where it came from.

The CLI (``ask``, ``search``, ``ingest`` ...), ``ragloop serve`` and ``ragloop mcp`` all read
it; ``ragloop config show`` prints the effective settings with secrets masked. The default
locations live here too: the knowledge base when none is named (:func:`default_kb_location`)
and where its traces are stored (:func:`kb_traces_location`).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote_plus, urlsplit, urlunsplit

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
)

from ragloop.core.budget import Budget
from ragloop.core.errors import ConfigError
from ragloop.core.files import is_postgres_dsn, traces_path_for
from ragloop.core.redaction import is_secret_parameter

CONFIG_ENV = "RAGLOOP_CONFIG"
CONFIG_FILE = "ragloop.toml"
ENV_PREFIX = "RAGLOOP_"
KEY_PREFIX = "rl-"  # how a ragloop API key starts, so a leaked one is recognisable
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_chosen: Path | None = None


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PostgresSettings(_Section):
    """``[kb.postgres]``: the PostgreSQL store's options when ``[kb] location`` is a PostgreSQL
    URL (docs/postgres.md). ``ef_search`` is the HNSW candidate list of a vector query (its
    recall against exact search is measured in BENCHMARKS.md); ``iterative_scan`` lets
    pgvector 0.8+ walk on until a filtered query has its ``top_k``; ``hnsw_m`` and
    ``hnsw_ef_construction`` shape the index when it is built; ``index_build_memory_mb`` is the
    most memory a build of it asks for (a graph that does not fit builds far slower);
    ``postings_cache_mb`` bounds the keyword postings a process keeps between queries (0: none)."""

    schema_name: str = Field(default="ragloop", alias="schema", min_length=1)
    pool_max_size: int = Field(default=10, ge=1)
    hnsw_m: int = Field(default=16, ge=2, le=100)
    hnsw_ef_construction: int = Field(default=64, ge=4, le=1000)
    ef_search: int = Field(default=100, ge=1, le=1000)
    iterative_scan: Literal["relaxed_order", "strict_order", "off"] = "relaxed_order"
    index_build_memory_mb: int = Field(default=1024, ge=64)
    postings_cache_mb: int = Field(default=512, ge=0)

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)  # `schema` as in the file (a BaseModel attribute)
        return {"schema": data.pop("schema_name"), **data}

    def store_options(self) -> dict[str, Any]:
        """The keyword arguments of ``PostgresStore`` these settings give."""
        return self.model_dump()


class KBSettings(_Section):
    """``[kb]``: the knowledge base. ``location`` is a SQLite file or a PostgreSQL URL
    (``postgresql://user:password@host/db``); ``embedder`` as ``ragloop ingest --embedder``;
    ``[kb.postgres]`` the PostgreSQL store's options."""

    location: str | None = None
    embedder: str = "default"
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)


class EngineSettings(_Section):
    """``[engine]``: which loop answers by default and its settings (unset: the engine's own
    defaults). ``target_precision``: answer confidently only when the calibrated chance that the
    answer is right reaches it (it replaces ``confidence_threshold``); ``calibration``: the file
    ``ragloop eval --calibrate`` wrote (relative to the working folder)."""

    default: Literal["rag", "agent", "retrieval"] = "rag"
    max_iterations: int | None = Field(default=None, ge=1, le=50)
    top_k: int | None = Field(default=None, ge=1, le=100)
    confidence_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    target_precision: float | None = Field(default=None, ge=0.0, le=1.0)
    calibration: str | None = None

    def settings(self, engine: str) -> dict[str, Any]:
        """The keyword options an engine of ``engine``'s kind is built with."""
        chosen: dict[str, Any] = {
            "max_iterations": self.max_iterations,
            "target_precision": self.target_precision,
            "calibration": self.calibration,
        }
        if engine in ("rag", "retrieval"):
            chosen["top_k"] = self.top_k
            if self.target_precision is None:  # a target precision replaces the threshold
                chosen["confidence_threshold"] = self.confidence_threshold
        return {k: v for k, v in chosen.items() if v is not None}


class ModelSettings(_Section):
    """``[model]``: ``spec`` as ``--model`` (``offline``, ``openai:MODEL``, ...); ``api_key`` and
    ``base_url`` replace the provider's environment variables."""

    spec: str = "offline"
    api_key: SecretStr | None = None
    base_url: str | None = None

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.api_key is not None:
            options["api_key"] = self.api_key.get_secret_value()
        if self.base_url is not None:
            options["base_url"] = self.base_url
        return options


class BudgetSettings(_Section):
    """``[budget]``: the budget of every run the server and ``ask`` start (unset: uncapped)."""

    max_tokens: int | None = Field(default=None, ge=0)
    max_dollars: float | None = Field(default=None, ge=0)
    max_wall_ms: float | None = Field(default=None, ge=0)
    max_iter: int | None = Field(default=None, ge=0)

    def budget(self) -> Budget | None:
        values = self.model_dump(exclude_none=True)
        return Budget(**values) if values else None


class KeySettings(_Section):
    """``[server.keys.NAME]``: one API key, stored as its hash (``ragloop config new-key``).
    ``collections`` limits what it may read (unset: every collection); ``admin`` lets it add
    and delete documents; ``max_concurrency`` replaces the server's per-key limit."""

    hash: str
    collections: list[str] | None = None
    admin: bool = False
    max_concurrency: int | None = Field(default=None, ge=1)

    @field_validator("hash")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if not _HASH.match(value):
            raise ValueError(
                "must be 'sha256:' and 64 hex digits (the hash `ragloop config new-key` prints), "
                "never the key itself"
            )
        return value

    @field_validator("collections")
    @classmethod
    def _names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not all(isinstance(v, str) and v.strip() for v in value):
            raise ValueError("must be a list of collection names")
        return value


class ServerSettings(_Section):
    """``[server]``: where ``ragloop serve`` listens and what a request may cost.

    With no ``keys`` the server answers requests from this machine only (and warns when bound
    to another address). ``max_body_bytes`` and ``max_question_chars`` cap a request,
    ``deadline_s`` its time (the run gets it as its wall-clock budget, then is cancelled),
    ``max_concurrency_per_key`` the requests one key runs at once (more are refused with 429),
    ``header_timeout_s`` how long a connection may take to send a request's headers and
    ``body_timeout_s`` its body after them (slower ones, slowloris, are closed).
    ``traces`` is where runs are stored: a SQLite file or a ``postgresql://`` URL (default:
    beside a SQLite knowledge base, and in the database of a PostgreSQL one, where every
    server of a fleet reads them). ``workers`` is how many processes ``ragloop serve`` runs
    on this host (one socket, requests spread by the kernel). ``access_log``: one line on
    stderr per request (method, path, status, milliseconds, the key's name; never the key).
    ``max_question_chars`` bounds ``ragloop ask`` too: the CLI and the server refuse the same
    questions, in the same words (:meth:`question_refusal`)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    keys: dict[str, KeySettings] = Field(default_factory=dict)
    max_body_bytes: int = Field(default=10_000_000, ge=1)
    max_question_chars: int = Field(default=4000, ge=1)
    deadline_s: float = Field(default=120.0, gt=0)
    max_concurrency_per_key: int = Field(default=16, ge=1)
    header_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    body_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    traces: str | None = None
    workers: int = Field(default=1, ge=1, le=64)
    cors_origins: list[str] = Field(default_factory=list)
    mcp: bool = True
    access_log: bool = True

    def question_refusal(self, text: object, field: str = "question") -> tuple[int, str] | None:
        """Why a question (or a query) is refused, in the words the CLI and the server both
        use: ``(422, ...)`` for one that is empty, ``(413, ...)`` for one longer than
        ``max_question_chars``, None for one that is taken. ``field`` names it as the caller
        sent it (``query`` for a search)."""
        if not isinstance(text, str) or not text.strip():
            return 422, f"{field}: empty; give some text"
        if len(text) > self.max_question_chars:
            return 413, (
                f"{field}: longer than {self.max_question_chars} characters ({len(text)} given; "
                "[server] max_question_chars)"
            )
        return None


class MCPSettings(_Section):
    """``[mcp]``: how ``ragloop mcp`` serves (``stdio`` for a desktop assistant, ``http`` for
    streamable HTTP at ``http://host:port/mcp``, with the server's keys)."""

    transport: Literal["stdio", "http"] = "stdio"
    host: str = "127.0.0.1"
    port: int = Field(default=8001, ge=0, le=65535)


class TracesSettings(_Section):
    """``[traces]``: what the local trace store keeps of each run (``ragloop ask``, ``ragloop
    serve``). ``content``: the question, queries and answer (true, the default: the run's own
    history on this machine); false keeps the run's structure only (steps, scores, chunk ids
    and sources). Telemetry exported (logs, OpenTelemetry) keeps content out either way unless
    ``RAGLOOP_TRACE_CONTENT=1``."""

    content: bool = True


class Settings(_Section):
    """The effective settings: the file's, with the environment's overrides."""

    kb: KBSettings = Field(default_factory=KBSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    mcp: MCPSettings = Field(default_factory=MCPSettings)
    traces: TracesSettings = Field(default_factory=TracesSettings)
    # where they came from, for `ragloop config show` and error messages
    source: str | None = Field(default=None, exclude=True)
    overrides: tuple[str, ...] = Field(default=(), exclude=True)

    def masked(self) -> dict[str, Any]:
        """The settings as data, secrets masked: the model's API key, the credentials inside
        every URL-valued setting (:func:`mask_url`: ``[kb] location``, ``[model] base_url`` and
        ``spec``, ...), and all but the start of each key's hash."""
        data: dict[str, Any] = _mask_urls(
            self.model_dump(mode="json", exclude={"source", "overrides"})
        )
        if self.model.api_key is not None:
            data["model"]["api_key"] = MASK
        for key in data["server"]["keys"].values():
            key["hash"] = key["hash"][:15] + "…"
        return data


MASK = "****"
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s\"'<>]+")


def mask_url(text: str) -> str:
    """``text`` with the credentials of each URL in it replaced by ``****``: the password of
    its user information (a lone user name too, as it is often a token) and the value of
    every query and fragment parameter named like a credential
    (:func:`~ragloop.core.redaction.is_secret_parameter`: ``api_key``, ``token``,
    ``X-Amz-Signature``, ``private_token``, ``#access_token=``, ... in any case)."""
    return _URL.sub(lambda found: _mask_one_url(found.group()), text)


def _mask_one_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:  # not parseable (a bad IPv6 host): show only its scheme
        return url.split("://", 1)[0] + "://" + MASK
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, has_password, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if has_password else f"{MASK}@{host}"
    query, fragment = _mask_parameters(parts.query), _mask_parameters(parts.fragment)
    if (netloc, query, fragment) == (parts.netloc, parts.query, parts.fragment):
        return url  # nothing to mask: the URL as written
    return urlunsplit(parts._replace(netloc=netloc, query=query, fragment=fragment))


def _mask_parameters(pairs: str) -> str:
    """``a=1&token=x`` with each credential's value masked (``#access_token=`` fragments of
    OAuth redirects too)."""
    return "&".join(_mask_parameter(pair) for pair in pairs.split("&")) if pairs else ""


def _mask_parameter(pair: str) -> str:
    name, has_value, _ = pair.partition("=")
    secret = has_value and is_secret_parameter(unquote_plus(name))
    return f"{name}={MASK}" if secret else pair


def _mask_urls(value: Any) -> Any:
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, dict):
        return {k: _mask_urls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_urls(v) for v in value]
    return value


# -- finding and reading -----------------------------------------------------------------------


def use_config_file(path: str | os.PathLike[str] | None) -> None:
    """Read settings from ``path`` from now on (``--config``); None goes back to the default
    search (``$RAGLOOP_CONFIG``, then ``./ragloop.toml``)."""
    global _chosen
    _chosen = None if path is None else Path(path).expanduser()


def config_path() -> Path | None:
    """The config file in force, or None when there is none."""
    if _chosen is not None:
        return _chosen
    env = os.environ.get(CONFIG_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    local = Path(CONFIG_FILE)
    return local if local.is_file() else None


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """The effective settings: ``path`` (else :func:`config_path`) read, the environment's
    overrides applied, validated. Raises :class:`ConfigError` naming the bad key."""
    file = Path(path).expanduser() if path is not None else config_path()
    data: dict[str, Any] = {}
    if file is not None:
        if not file.is_file():
            raise ConfigError("config", f"no config file at {file}")
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as error:
            raise ConfigError("config", f"{file} is not valid TOML: {error}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError("config", f"{file} cannot be read: {error}") from None
    overrides = _apply_environment(data)
    where = str(file) if file is not None else "the defaults"
    try:
        settings = Settings.model_validate(data)
    except ValidationError as error:
        problem = error.errors()[0]
        key = ".".join(str(part) for part in problem["loc"])
        env = _env_name(key)
        origin = f"${env}" if env in overrides else where
        raise ConfigError(key, f"{problem['msg']} (in {origin})") from None
    return settings.model_copy(
        update={"source": str(file) if file else None, "overrides": overrides}
    )


def _env_name(key: str) -> str:
    return ENV_PREFIX + "__".join(key.split(".")).upper()


def _apply_environment(data: dict[str, Any]) -> tuple[str, ...]:
    """Set the keys the environment overrides in ``data``; the variables used."""
    used = []
    if os.environ.get("RAGLOOP_KB"):
        data.setdefault("kb", {})["location"] = os.environ["RAGLOOP_KB"]
        used.append("RAGLOOP_KB")
    for name, raw in sorted(os.environ.items()):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if not all(path):
            continue
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(".".join(path), f"${name} sets a key inside a value")
            node = child
        node[path[-1]] = _env_value(raw)
        used.append(name)
    return tuple(used)


def _env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        return raw


# -- default locations ---------------------------------------------------------------------------


def data_folder() -> Path:
    """The user's data folder for ragloop (the default knowledge base)."""
    return Path(platformdirs.user_data_dir("ragloop"))


def default_kb_location(settings: Settings | None = None) -> str:
    """The knowledge base when none is named: $RAGLOOP_KB (a file or a postgresql:// URL), else
    ``[kb] location`` of ``settings`` (loaded now when not given), else kb.sqlite in the user's
    data folder. With $RAGLOOP_KB set the config file is not read."""
    env = os.environ.get("RAGLOOP_KB")
    if env:
        return env
    configured = (settings or load_settings()).kb.location
    return configured or str(data_folder() / "kb.sqlite")


def kb_traces_location(location: str) -> str:
    """Where the traces of the knowledge base at ``location`` are stored: the file beside it
    (:func:`traces_path_for`), or, for PostgreSQL, the same database (its URL: the traces go
    into a schema of their own there, ``ragloop_traces``), so every server and command that
    reaches the knowledge base reaches its traces."""
    if is_postgres_dsn(location):
        return location
    return str(traces_path_for(Path(location).expanduser()))


# -- API keys ------------------------------------------------------------------------------------


def hash_key(key: str) -> str:
    """How a key is stored: ``sha256:`` and the hex digest. Keys are long random tokens, so a
    fast hash is safe; the key itself is never stored."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """A new random API key and its hash."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key)

"""The PostgreSQL store's connections: the pool, the migrations, write transactions retried
on deadlock, and the conversions of values for SQL. :mod:`.writes` and :mod:`.reads` are built
on :class:`PostgresDatabase`; :mod:`.store` joins them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from ragloop.config import PostgresSettings
from ragloop.core.errors import ConfigError, KnowledgeBaseNotFound, StoreError
from ragloop.kb.stores.postgres.postings_cache import PostingsCache
from ragloop.kb.stores.postgres.schema import (
    MIGRATIONS,
    migrate,
    pgvector_version,
    set_search_path,
)
from ragloop.kb.stores.rows import model_from_meta

try:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg_pool import ConnectionPool

    _MISSING: ImportError | None = None
except ImportError as error:  # the postgres extra is not installed
    _MISSING = error

T = TypeVar("T")
DEFAULTS = PostgresSettings()
IterativeScan = Literal["relaxed_order", "strict_order", "off"]
RETRIES = 5  # attempts of a write transaction the server broke off to end a deadlock


class PostgresDatabase:
    """A PostgreSQL schema and the pool of connections to it."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "ragloop",
        create: bool = True,
        pool_min_size: int = 1,
        pool_max_size: int = DEFAULTS.pool_max_size,
        connect_timeout_s: float = 10.0,
        hnsw_m: int = DEFAULTS.hnsw_m,
        hnsw_ef_construction: int = DEFAULTS.hnsw_ef_construction,
        ef_search: int = DEFAULTS.ef_search,
        iterative_scan: IterativeScan = DEFAULTS.iterative_scan,
        index_build_memory_mb: int = DEFAULTS.index_build_memory_mb,
        postings_cache_mb: int = DEFAULTS.postings_cache_mb,
    ) -> None:
        if _MISSING is not None:
            raise StoreError(
                "the PostgreSQL store needs the postgres extra: pip install 'ragloop[postgres]'"
            ) from _MISSING
        try:  # the options of [kb.postgres], checked by the same rules
            PostgresSettings.model_validate(
                {"schema": schema, "pool_max_size": pool_max_size, "hnsw_m": hnsw_m,
                 "hnsw_ef_construction": hnsw_ef_construction, "ef_search": ef_search,
                 "iterative_scan": iterative_scan, "index_build_memory_mb": index_build_memory_mb,
                 "postings_cache_mb": postings_cache_mb}
            )  # fmt: skip
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise ConfigError(field, f"{first['msg']} (a PostgreSQL store option)") from None
        self.schema = schema
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construction = hnsw_ef_construction
        self.ef_search = ef_search
        self.iterative_scan: IterativeScan = iterative_scan
        self.index_build_memory_mb = index_build_memory_mb
        self._model: tuple[str, int] | None = None
        self._missing_after = 0  # the last chunk pk the embedding phase was given
        self._postings_cache = (
            PostingsCache(postings_cache_mb * 2**20) if postings_cache_mb > 0 else None
        )
        self._lexemes_of: dict[str, list[str]] = {}  # query words -> their lexemes
        params = conninfo_to_dict(dsn)
        params.setdefault("connect_timeout", str(max(1, round(connect_timeout_s))))
        params.setdefault("application_name", "ragloop")
        self._conninfo = make_conninfo("", **params)
        self.location = describe(params, schema)
        self._has_iterative_scan = self._migrate(create)
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            self._conninfo,
            min_size=pool_min_size,
            max_size=pool_max_size,
            open=False,
            configure=self._configure,
            check=ConnectionPool.check_connection,
            name=f"ragloop-{schema}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout_s)
        except Exception as error:
            self._pool.close()
            raise StoreError(f"cannot open a connection pool to {self.location}: {error}") from None

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        try:
            return psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.OperationalError as error:
            reason = str(error).strip().splitlines()[-1] if str(error).strip() else "no reason"
            raise StoreError(f"cannot connect to PostgreSQL at {self.location}: {reason}") from None

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        set_search_path(conn, self.schema, local=False)
        register_vector(conn)  # numpy arrays go in as vectors, in binary; vectors come out so
        conn.commit()

    def _migrate(self, create: bool) -> bool:
        """Create or upgrade the schema (only reads when it is up to date, so a read-only
        replica opens too); returns whether pgvector has iterative index scans."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT to_regclass(quote_ident(%s) || '._ragloop_migrations')::text",
                (self.schema,),
            ).fetchone()
            applied = None
            if row is not None and row[0] is not None:
                applied = conn.execute(f"SELECT max(version) FROM {row[0]}").fetchone()
            elif not create:
                raise KnowledgeBaseNotFound(
                    f"no ragloop knowledge base in {self.location}; create one with: "
                    "ragloop ingest PATH --kb DSN"
                )
            if applied is not None and applied[0] == MIGRATIONS[-1][0]:
                return pgvector_version(conn) >= (0, 8)
            return migrate(conn, self.schema) >= (0, 8)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A pooled connection. A database failure while it is in use (a dropped table, a
        cancelled statement, a server gone mid-query, no free connection in time) is raised
        as :class:`StoreError`, the store's documented error, with the server's message."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else "no reason"
            kind = type(error).__name__
            raise StoreError(f"PostgreSQL at {self.location} failed ({kind}): {reason}") from error

    def _write(self, work: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> T:
        """Run ``work`` in one transaction, again when the server breaks a deadlock with it."""
        for attempt in range(RETRIES):
            try:
                with self._connection() as conn, conn.transaction():
                    return work(conn)
            except StoreError as error:
                broken = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
                if not isinstance(error.__cause__, broken) or attempt == RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._pool.close()

    def embedding_model(self) -> tuple[str, int] | None:
        with self._connection() as conn:
            return self._recorded_model(conn)

    def _recorded_model(self, conn: psycopg.Connection[tuple[Any, ...]]) -> tuple[str, int] | None:
        """The recorded model, remembered once recorded (it never changes after that)."""
        if self._model is None:
            self._model = recorded_model(conn)
        return self._model


def recorded_model(conn: psycopg.Connection[tuple[Any, ...]]) -> tuple[str, int] | None:
    return model_from_meta(conn)


def vectors_stored(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
    row = conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()
    return int(row[0]) if row else 0


def plain_text(value: str) -> str:
    return value.replace("\x00", "")  # PostgreSQL text (and jsonb) cannot hold NUL


def as_vector(values: Sequence[float] | npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float32]:
    """A vector as numpy float32, which pgvector's binary dumper sends (registered on every
    connection of the pool: 4 bytes a number, where a list of floats went as a float8 array
    or a text; turning lists into SQL arrays was most of the time vectors took to store)."""
    return np.asarray(values, dtype=np.float32)


def json_text(value: Any) -> str:
    def clean(item: Any) -> Any:
        if isinstance(item, str):
            return plain_text(item)
        if isinstance(item, dict):
            return {clean(k): clean(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [clean(v) for v in item]
        return item

    return json.dumps(clean(value))


def describe(params: dict[str, Any], schema: str) -> str:
    """Where the store is, for messages and stats: the connection without its password."""
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    user = f"{params['user']}@" if params.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{params.get('dbname') or ''} (schema {schema})"


@contextlib.contextmanager
def index_probes(conn: psycopg.Connection[tuple[Any, ...]]) -> Iterator[None]:
    """Joins in this block probe an index row by row: no hash or merge join. The planner cannot
    count the lexemes of the chunks a batch deletes (it guessed 13 million for 64,000) and
    hashed the whole postings table to find theirs (0.4-1.6 s a batch at 20,000 chunks, and
    growing with the table) instead of probing their primary key (0.3 s). The settings are
    local to the transaction, which an error inside the block rolls back."""
    conn.execute(
        "SELECT set_config('enable_hashjoin', 'off', true), "
        "set_config('enable_mergejoin', 'off', true)"
    )
    yield
    conn.execute("SET LOCAL enable_hashjoin TO DEFAULT")
    conn.execute("SET LOCAL enable_mergejoin TO DEFAULT")

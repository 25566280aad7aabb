"""Where traces are kept, chosen by location: a SQLite file (:class:`~.traces.TraceStore`) or a
PostgreSQL database (:class:`PostgresTraceStore`), both a :class:`~.traces.TraceStorage`.

A fleet of servers over one PostgreSQL knowledge base keeps its traces in that database, in a
schema of their own beside the knowledge base's (``ragloop_traces`` beside ``ragloop``): a run
answered by one server is read through any other, and no server needs a file another can
see. Traces stay apart from the corpus (a knowledge base's schema can be dropped and rebuilt
without them), as the SQLite file stays apart from the knowledge base's file.

The SQL is written here with psycopg (the ``postgres`` extra), not through the knowledge base's
store: the trace store is observability, below the knowledge base. Its schema has numbered
migrations of its own (``_migrations``), applied on the first write, one process at a time (an
advisory lock), so reading never creates anything: ``ragloop traces list`` against a database
without traces says there are none, and a read-only replica can be read.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ragloop.config import mask_url
from ragloop.core.errors import StoreError, TraceNotFound
from ragloop.core.files import is_postgres_dsn
from ragloop.observability.traces import (
    SUMMARY,
    TRACE_COLUMNS,
    TraceRecord,
    TraceStorage,
    TraceStore,
    events_json,
    like_prefix,
    readable_records,
    summary_values,
    the_one,
)

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg_pool import ConnectionPool, PoolTimeout

    _MISSING: ImportError | None = None
except ImportError as error:  # the postgres extra is not installed
    _MISSING = error

T = TypeVar("T")
DEFAULT_SCHEMA = "ragloop_traces"  # beside the knowledge base's default schema, "ragloop"

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        # meta and events are JSON as text, as in the SQLite file: jsonb would refuse a \u0000
        # in a question and reorder what it stores; the C collation lets an id prefix use the
        # primary key's index
        """
        CREATE TABLE traces (
            id text COLLATE "C" PRIMARY KEY,
            engine text NOT NULL,
            started_at double precision NOT NULL,
            finished_at double precision,
            question text,
            answer text,
            stop_reason text,
            iterations integer NOT NULL DEFAULT 0,
            content boolean NOT NULL,
            meta text NOT NULL DEFAULT '{}',
            events text NOT NULL,
            saved_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX traces_started ON traces (started_at DESC, id);
        """,
    ),
    (2, "ALTER TABLE traces ADD COLUMN cited text NOT NULL DEFAULT '[]';"),
]


def traces_schema_for(kb_schema: str) -> str:
    """The traces schema beside a knowledge base's schema: ``ragloop`` -> ``ragloop_traces``."""
    return f"{kb_schema}_traces"


def _lock_key(schema: str) -> int:
    """The advisory lock that lets one process at a time migrate ``schema`` (a signed bigint)."""
    digest = hashlib.sha256(f"ragloop-traces:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresTraceStore:
    """Traces in a schema of a PostgreSQL database (created on the first save; numbered
    migrations). ``dsn`` is a libpq URL or key-value string; ``schema`` defaults to
    ``ragloop_traces``. Connections come from a small pool, checked before use, so a restarted
    server is reconnected to. A database failure is a :class:`~ragloop.StoreError` naming the
    server (without its password)."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        pool_max_size: int = 4,
        connect_timeout_s: float = 10.0,
    ) -> None:
        if _MISSING is not None:
            raise StoreError(
                "traces in PostgreSQL need the postgres extra: pip install 'ragloop[postgres]'"
            ) from _MISSING
        self.schema = schema
        params = conninfo_to_dict(dsn)
        params.setdefault("connect_timeout", str(max(1, round(connect_timeout_s))))
        params.setdefault("application_name", "ragloop-traces")
        conninfo = make_conninfo("", **params)
        where = mask_url(dsn) if is_postgres_dsn(dsn) else _described(params)
        self._location = f"{where} (schema {schema})"
        self._timeout_s = connect_timeout_s
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            conninfo,
            min_size=0,
            max_size=pool_max_size,
            open=False,
            configure=self._configure,
            check=ConnectionPool.check_connection,
            name=f"ragloop-traces-{schema}",
        )
        self._opened = False
        self._migrated = False  # this process brought the schema up to date
        self._seen = False  # the traces table was there when last looked for

    @property
    def location(self) -> str:
        return self._location

    @property
    def exists(self) -> bool:
        """Whether the traces table is there (a read never creates it)."""
        if not (self._migrated or self._seen):
            table = sql.Identifier(self.schema, "traces").as_string()
            row = self._run(
                lambda conn: conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
            )
            self._seen = row is not None and row[0] is not None
        return self._migrated or self._seen

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "SELECT set_config('search_path', quote_ident(%s), false)", (self.schema,)
        ).fetchone()
        conn.commit()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        if not self._opened:
            self._pool.open(wait=False)
            self._opened = True
        try:
            with self._pool.connection(timeout=self._timeout_s) as conn:
                yield conn
        except psycopg.Error as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else "no reason"
            kind = type(error).__name__
            raise StoreError(f"PostgreSQL at {self.location} failed ({kind}): {reason}") from None
        except PoolTimeout as error:
            raise StoreError(f"cannot connect to PostgreSQL at {self.location}: {error}") from None

    def _run(self, work: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> T:
        """``work`` in one transaction on a pooled connection."""
        with self._connection() as conn, conn.transaction():
            return work(conn)

    def _migrate(self) -> None:
        def migrate(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(self.schema),))
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS _migrations (version integer PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM _migrations")}
            for version, script in MIGRATIONS:
                if version not in done:
                    conn.execute(script)
                    conn.execute("INSERT INTO _migrations (version) VALUES (%s)", (version,))

        self._run(migrate)
        self._migrated = True

    def save(self, record: TraceRecord) -> None:
        if not self._migrated:
            self._migrate()
        values = [_plain(v) for v in summary_values(record)]
        self._run(
            lambda conn: conn.execute(
                f"INSERT INTO traces ({SUMMARY}, events) "
                f"VALUES ({', '.join(['%s'] * (len(TRACE_COLUMNS) + 1))}) "
                "ON CONFLICT (id) DO UPDATE SET "
                + ", ".join(f"{c} = excluded.{c}" for c in (*SUMMARY.split(", "), "events")),
                (*values, _plain(events_json(record))),
            )
        )

    def list(self, limit: int = 50) -> list[TraceRecord]:
        """The latest traces, newest first (without their events)."""
        if not self.exists:
            return []
        rows = self._run(
            lambda conn: conn.execute(
                f"SELECT {SUMMARY} FROM traces ORDER BY started_at DESC, id LIMIT %s",
                (limit,),
            ).fetchall()
        )
        return readable_records(rows)

    def get(self, trace_id: str) -> TraceRecord:
        """The trace with this id, or the only one whose id starts with it."""
        if not self.exists:
            raise TraceNotFound(f"no traces at {self.location}")
        rows = self._run(
            lambda conn: conn.execute(
                f"SELECT {SUMMARY}, events FROM traces "
                "WHERE id LIKE %s ESCAPE '\\' ORDER BY id LIMIT 2",
                (_plain(like_prefix(trace_id)),),
            ).fetchall()
        )
        return the_one(rows, trace_id, self.location)

    def close(self) -> None:
        self._pool.close()


def _plain(value: Any) -> Any:
    """Text PostgreSQL can hold: no NUL (its text type has none); JSON text escapes them."""
    return value.replace("\x00", "") if isinstance(value, str) else value


def _described(params: dict[str, Any]) -> str:
    host = params.get("host") or "localhost"
    user = f"{params['user']}@" if params.get("user") else ""
    return f"postgresql://{user}{host}:{params.get('port') or 5432}/{params.get('dbname') or ''}"


def open_trace_store(
    location: str | os.PathLike[str], *, schema: str = DEFAULT_SCHEMA
) -> TraceStorage:
    """The trace store at ``location``: a ``postgresql://`` URL (traces in ``schema`` of that
    database) or a SQLite file."""
    if isinstance(location, str) and is_postgres_dsn(location):
        return PostgresTraceStore(location, schema=schema)
    return TraceStore(Path(location))

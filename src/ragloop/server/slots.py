"""How many runs each API key has at once: counted in this process, or across every server of
a PostgreSQL knowledge base.

A key may run ``max_concurrency`` requests at once; one more is refused (429). With a SQLite
knowledge base the count is this process's (:class:`ProcessSlots`). With PostgreSQL every
server counts against one limit (:class:`PostgresSlots`): a run holds one of the key's
``max_concurrency`` slots, each a session advisory lock, taken with ``pg_try_advisory_lock``
(never waiting) on one connection the process keeps for them. PostgreSQL frees a session's
locks when the session ends, so a server that crashes, is killed or loses its connection
frees its slots at once: no lease to expire, no key blocked by a dead server.

Advisory locks are re-entrant within a session, so the process remembers which slots its
runs hold and tries only the others. If the connection is lost while runs hold slots, their
locks are gone with it; they finish as they were, and the slots are counted afresh on the new
connection (a short window where a key may run more than its limit, never fewer).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import threading
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ragloop.core.errors import StoreError

logger = logging.getLogger("ragloop.server")

Shared = Literal["process", "postgresql"]


@dataclass(frozen=True)
class Slot:
    """A slot a run holds: its key's name, its number, and the connection it was taken on
    (``session``: a slot of a lost connection is gone already, and is not freed twice)."""

    name: str
    number: int
    session: int = 0


class Slots(Protocol):
    """Run slots per key: :meth:`take` one (None when all ``limit`` are held), :meth:`give`
    it back. ``shared`` says who counts: this process, or every server of the database."""

    shared: Shared

    async def take(self, name: str, limit: int) -> Slot | None: ...
    def give(self, slot: Slot) -> None: ...
    def running(self, name: str) -> int:
        """The runs of ``name`` in this process."""
        ...

    def close(self) -> None: ...


class ProcessSlots:
    """The runs of this process, counted in memory (changed on the event loop's thread)."""

    shared: Shared = "process"

    def __init__(self) -> None:
        self._held: dict[str, set[int]] = {}

    async def take(self, name: str, limit: int) -> Slot | None:
        free = _free(self._held, name, limit)
        if not free:
            return None
        self._held[name].add(free[0])
        return Slot(name, free[0])

    def give(self, slot: Slot) -> None:
        self._held.get(slot.name, set()).discard(slot.number)

    def running(self, name: str) -> int:
        return len(self._held.get(name, ()))

    def close(self) -> None:
        pass


def _free(held: dict[str, set[int]], name: str, limit: int) -> list[int]:
    """The slots of ``name`` below ``limit`` this process holds none of, in order."""
    mine = held.setdefault(name, set())
    return [number for number in range(limit) if number not in mine]


# the first of the slots given whose lock this session takes: the scan stops at the first row
# that passes (no ORDER BY, which would try every lock), so one lock is taken, in one round trip
TAKE_ONE = "SELECT n FROM unnest(%s::integer[]) AS n WHERE pg_try_advisory_lock(%s, n) LIMIT 1"


def lock_space(namespace: str, name: str) -> int:
    """The first key of a slot's advisory lock (the slot number is the second): a signed
    32-bit hash of the knowledge base's schema and the key's name. The two-key form keeps
    these locks apart from the store's own (one 64-bit key each)."""
    digest = hashlib.sha256(f"ragloop-slots\0{namespace}\0{name}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


class PostgresSlots:
    """Slots as session advisory locks in the knowledge base's database, shared by every
    server of it. ``namespace`` (the knowledge base's schema) keeps two knowledge bases in
    one database apart. One connection, used from one thread of its own, so the event loop
    never waits on the database and the locks are taken and freed in the order asked."""

    shared: Shared = "postgresql"

    def __init__(self, conninfo: str, *, namespace: str, connect_timeout_s: float = 10.0) -> None:
        import psycopg  # the postgres extra: the knowledge base is in PostgreSQL

        self._psycopg = psycopg
        self._conninfo = conninfo
        self.namespace = namespace
        self._timeout_s = connect_timeout_s
        self._conn: Any = None
        self._session = 0  # which connection: one more each time it is made again
        self._held: dict[str, set[int]] = {}  # changed on the one thread only
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ragloop-slots")
        self._closed = threading.Event()

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            if self._conn is not None:
                logger.warning("the concurrency slots' connection was lost; counting afresh")
            self._held.clear()  # a new session holds no lock
            try:
                self._conn = self._psycopg.connect(
                    self._conninfo,
                    autocommit=True,
                    connect_timeout=max(1, round(self._timeout_s)),
                    application_name="ragloop-slots",
                )
            except self._psycopg.Error as error:
                raise StoreError(f"cannot count the key's runs in PostgreSQL: {error}") from None
            self._session += 1
        return self._conn

    def _take(self, name: str, limit: int) -> Slot | None:
        space = lock_space(self.namespace, name)
        for attempt in range(2):  # once more on a new connection when the old one broke
            conn = self._connection()
            free = _free(self._held, name, limit)
            try:
                # asked even when this process holds every slot: a lost session shows here
                row = conn.execute(TAKE_ONE, (free, space)).fetchone()
            except self._psycopg.OperationalError as error:
                conn.close()
                if attempt == 1:
                    raise StoreError(
                        f"cannot count the key's runs in PostgreSQL: {error}"
                    ) from None
                continue
            if row is None:
                return None
            self._held[name].add(row[0])
            return Slot(name, row[0], self._session)
        return None

    def _give(self, slot: Slot) -> None:
        if slot.session != self._session or self._conn is None or self._conn.closed:
            return  # taken on a connection since lost: its lock went with it
        self._held.get(slot.name, set()).discard(slot.number)
        try:
            self._conn.execute(
                "SELECT pg_advisory_unlock(%s, %s)",
                (lock_space(self.namespace, slot.name), slot.number),
            )
        except self._psycopg.Error as error:  # the lock ends with the session
            logger.warning("could not free a concurrency slot (%s); its session ends it", error)

    async def take(self, name: str, limit: int) -> Slot | None:
        return await asyncio.wrap_future(self._thread.submit(self._take, name, limit))

    def give(self, slot: Slot) -> None:
        # not awaited: a run ends (or is cancelled) without waiting on the database; the one
        # thread frees the slot before it takes any asked for later
        if not self._closed.is_set():
            self._thread.submit(self._give, slot)

    def running(self, name: str) -> int:
        return len(self._held.get(name, ()))

    def held_everywhere(self, name: str) -> int:
        """The slots of ``name`` every server of the database holds now."""

        def count() -> int:
            row = (
                self._connection()
                .execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
                    "AND l.classid::bigint = %s AND d.datname = current_database()",
                    (lock_space(self.namespace, name) & 0xFFFFFFFF,),
                )
                .fetchone()
            )
            return int(row[0]) if row else 0

        return self._thread.submit(count).result()

    def close(self) -> None:
        self._closed.set()

        def end() -> None:
            if self._conn is not None:
                self._conn.close()  # the session's locks end with it

        self._thread.submit(end).result()
        self._thread.shutdown()

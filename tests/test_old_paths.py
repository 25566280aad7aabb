"""Every import path a module had before it moved (issue 33; CHANGELOG.md) still imports it:
the very same module object, so a class is one class under both names and patching either
patches both. Each check runs in a fresh interpreter, where nothing is imported yet."""

from __future__ import annotations

import subprocess
import sys

import pytest

MOVED = {
    "ragloop.retrieval.knowledge_base": "ragloop.kb.knowledge_base",
    "ragloop.retrieval.readers": "ragloop.kb.readers",
    "ragloop.retrieval.html_reader": "ragloop.kb.readers.html",
    "ragloop.retrieval.ingest": "ragloop.kb.ingest.discover",
    "ragloop.retrieval.ingest_run": "ragloop.kb.ingest.pipeline",
    "ragloop.retrieval.bm25": "ragloop.kb.index.bm25",
    "ragloop.retrieval.embedders": "ragloop.kb.embedding.embedders",
    "ragloop.retrieval.embedding_cache": "ragloop.kb.embedding.cache",
    "ragloop.retrieval.store": "ragloop.kb.stores.base",
    "ragloop.retrieval.store_sqlite": "ragloop.kb.stores.sqlite.store",
    "ragloop.retrieval.store_postgres": "ragloop.kb.stores.postgres.store",
    "ragloop.retrieval.conformance": "ragloop.testing.conformance",
    "ragloop.retrieval.postgres_server": "ragloop.testing.postgres",
    "ragloop.components.corpus": "ragloop.components.heuristics.corpus",
    "ragloop.components.prompts": "ragloop.components.llm.prompts",
    "ragloop.core.rag_records": "ragloop.core.records.rag",
    "ragloop.core.sqlite_wal": "ragloop.core.files",
    "ragloop.offline_retrieval": "ragloop.offline",
}


def run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize(("old", "new"), MOVED.items())
def test_an_old_path_imports_the_module_at_its_new_one(old, new):
    if old == "ragloop.offline_retrieval":  # an alias module: its names are the new ones
        same = "a.offline_retrieval_loop is b.offline_retrieval_loop"
        check = f"import {old} as a, {new} as b\nassert {same}"
    else:
        check = f"import {old} as a, {new} as b\nassert a is b, (a, b)"
    run(check)


def test_every_alias_the_packages_declare_resolves():
    run(
        "import importlib, sys\n"
        "import ragloop.retrieval, ragloop.components, ragloop.core\n"
        "finders = [f for f in sys.meta_path if type(f).__name__ == '_MovedModules']\n"
        "assert len(finders) == 3, finders\n"
        "for finder in finders:\n"
        "    for old, new in finder.moved.items():\n"
        "        assert importlib.import_module(old) is importlib.import_module(new), old\n"
    )


def test_the_documented_deep_paths_and_the_from_import_forms_still_work():
    run(
        "from ragloop.retrieval.postgres_server import TemporaryPostgres\n"
        "from ragloop.testing.postgres import TemporaryPostgres as New\n"
        "assert TemporaryPostgres is New\n"
        "from ragloop.retrieval import ingest_run\n"
        "from ragloop.kb.ingest import pipeline\n"
        "assert ingest_run is pipeline\n"
        "from ragloop.retrieval.store_sqlite import SQLiteStore, MIGRATIONS\n"
        "from ragloop.kb.stores.sqlite.schema import MIGRATIONS as M\n"
        "assert MIGRATIONS is M\n"
        "import ragloop.retrieval.store_sqlite as old, ragloop.kb.stores.sqlite.store as new\n"
        "old.PATCHED = 1\n"
        "assert new.PATCHED == 1\n"
    )


def test_a_path_that_never_existed_is_still_an_import_error():
    done = subprocess.run(
        [sys.executable, "-c", "import ragloop.retrieval.no_such_module"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError" in done.stderr

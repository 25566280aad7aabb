"""What ``import ragloop`` and ``ragloop --help`` load (issue 18, item 12): nothing heavy. How
long they take is measured in benchmarks/bench_startup.py, never asserted here."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import click

import ragloop
from ragloop.cli import COMMANDS, main

HEAVY = ("numpy", "onnxruntime", "tokenizers", "httpx", "psycopg", "rich", "pydantic", "Stemmer")


def loaded_after(code: str) -> set[str]:
    """The top-level packages a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(done.stdout.split())


def test_import_ragloop_loads_nothing_heavy():
    assert loaded_after("import ragloop").isdisjoint(HEAVY)


def test_help_loads_no_command_and_nothing_heavy():
    code = (
        "import sys\nfrom ragloop.cli import main\nsys.argv = ['ragloop', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    loaded = loaded_after(code)
    assert loaded.isdisjoint(HEAVY)
    modules = subprocess.run(
        [sys.executable, "-c", f"{code}\nprint(sorted(m for m in sys.modules if 'cli.' in m))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert modules.strip().endswith("[]")  # no command module was imported


def test_a_name_is_imported_on_first_use_and_the_subpackages_stay_reachable():
    code = "import ragloop, sys\nassert 'ragloop.engines.rag' not in sys.modules\nragloop.RAGLoop"
    assert "ragloop" in loaded_after(code)
    assert ragloop.RAGLoop.__module__ == "ragloop.engines.rag"
    assert ragloop.providers.ALLOW_MODEL_REQUESTS is not None  # a bare `import ragloop` did
    assert isinstance(ragloop.__version__, str)


def test_the_lazy_names_the_type_checking_imports_and_all_agree():
    tree = ast.parse(Path(ragloop.__file__).read_text(encoding="utf-8"))
    guarded = next(n for n in tree.body if isinstance(n, ast.If))  # if _typing.TYPE_CHECKING
    imported: dict[str, tuple[str, ...]] = {}
    for node in guarded.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            imported[node.module] = imported.get(node.module, ()) + tuple(
                a.name for a in node.names
            )
    assert imported == ragloop._EXPORTS
    names = {name for group in imported.values() for name in group}
    assert set(ragloop.__all__) - {"__version__"} <= names


def test_the_help_summaries_are_the_commands_own():
    ctx = click.Context(main)
    for name, (_, summary) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None
        assert command.get_short_help_str(10_000) == summary


def test_the_search_command_imports_only_what_a_search_needs():
    """``ragloop search --kb FILE`` reads no config file and builds none of the loops' records
    (benchmarks/bench_pydocs_search.py measures what that saves)."""
    code = "import ragloop.cli.search"
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(done.stdout.split())
    unneeded = {
        "ragloop.config",
        "ragloop.core.records.agent",
        "ragloop.core.records.rag",
        "ragloop.core.records.retrieval",
        "ragloop.core.budget",
        "asyncio",
    }
    assert loaded & unneeded == set()
    assert "ragloop.kb.knowledge_base" in loaded


def _program(argv: list[str], before: str = "") -> subprocess.CompletedProcess[str]:
    argv = ["ragloop", *argv]
    code = f"import sys\n{before}\nsys.argv = {argv!r}\nfrom ragloop.cli import run\nrun()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_program_exits_with_the_commands_status_after_exit_handlers_ran():
    handler = "import atexit\natexit.register(lambda: print('handler ran', flush=True))"
    done = _program(["--version"], handler)
    assert done.returncode == 0
    assert "ragloop" in done.stdout
    assert done.stdout.strip().endswith("handler ran")  # after the output, as at a normal exit
    missing = _program(["search"])  # no QUERY: click's usage error
    assert missing.returncode == 2
    assert "Missing argument" in missing.stderr
    nowhere = _program(["search", "tent", "--kb", "/nonexistent/kb.sqlite"])
    assert nowhere.returncode == 1
    assert "no knowledge base" in nowhere.stderr

"""The knowledge-base commands, run as a user would: in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ragloop.testing.conformance import write_corpus


def ragloop(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "ragloop", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture
def kb_env(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    (docs / "binary.txt").write_bytes(b"\x00\x01binary")
    return tmp_path, docs, {"RAGLOOP_KB": str(tmp_path / "kb.sqlite")}


def test_ingest_prints_a_summary_with_skipped_files(kb_env):
    tmp_path, docs, env = kb_env
    result = ragloop("ingest", "docs", "--embedder", "hash", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "added" in result.stdout
    assert "chunks added" in result.stdout
    assert "docs/binary.txt" in result.stdout
    assert "binary file (contains NUL bytes)" in result.stdout
    again = ragloop("ingest", str(docs), "--json", env=env)
    report = json.loads(again.stdout)
    assert (report["added"], report["unchanged"]) == (0, 4)


def test_a_skipped_file_is_one_line_with_its_reason_and_nothing_else(kb_env):
    """Issue 58, item 11: no traceback for a JSON number too long to read, no pypdf notes on
    stderr for PDFs it cannot read; each file one line of the report."""
    tmp_path, docs, env = kb_env
    (docs / "huge-number.json").write_text('{"n": ' + "9" * 100_000 + "}", encoding="utf-8")
    (docs / "not-a.pdf").write_bytes(b"not a pdf at all")
    (docs / "cut.pdf").write_bytes(b"%PDF-1.4\n1 0 obj<<>>endobj\n")
    result = ragloop("ingest", "docs", "--embedder", "hash", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == ""
    skipped = {
        line.split("\t")[0]: line.split("\t")[1]
        for line in result.stdout.splitlines()
        if line.startswith("docs/") and "\t" in line
    }
    assert "4300 digits" in skipped["docs/huge-number.json"]
    assert skipped["docs/not-a.pdf"].startswith("unreadable PDF")
    assert skipped["docs/cut.pdf"].startswith("unreadable PDF")


def test_two_identical_ingests_at_once_report_what_each_did(tmp_path):
    """Issue 58, item 12: both read an empty knowledge base and write the same files; each
    reports only the documents it added (the other's it finds already written)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(300):
        (docs / f"note-{n:03}.md").write_text(f"# Note {n}\n\nNote number {n} says hello.")
    command = [sys.executable, "-m", "ragloop", "ingest", str(docs), "--json"]
    env = {**os.environ, "RAGLOOP_KB": str(tmp_path / "kb.sqlite")}
    runs = [
        subprocess.Popen([*command, "--embedder", "hash"], stdout=subprocess.PIPE, env=env)
        for _ in range(2)
    ]
    reports = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert all(r["added"] + r["updated"] + r["unchanged"] == 300 for r in reports), reports
    assert sum(r["added"] for r in reports) == 300, reports
    assert all(r["updated"] == 0 for r in reports), reports


def test_ingest_fails_when_a_path_does_not_exist(kb_env):
    tmp_path, docs, env = kb_env
    result = ragloop("ingest", str(docs), str(tmp_path / "missing"), env=env)
    assert result.returncode == 2
    assert "no such file or directory" in result.stderr
    assert "missing" in result.stderr
    assert not (tmp_path / "kb.sqlite").exists()


def test_search_table_and_json(kb_env):
    tmp_path, docs, env = kb_env
    ragloop("ingest", str(docs), "--embedder", "hash", "--collection", "shop", env=env)
    table = ragloop("search", "tent weight", "--top-k", "2", env=env, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "camping/tents.md" in table.stdout  # relative to the folder ingested
    assert str(tmp_path) not in table.stdout
    assert "Ridgeline 2 tent weighs" in table.stdout
    as_json = ragloop("search", "tent weight", "--mode", "bm25", "--json", "-c", "shop", env=env)
    chunks = json.loads(as_json.stdout)
    assert chunks[0]["metadata"]["title"] == "Tents"
    assert chunks[0]["source"] == "camping/tents.md"
    assert "root" not in chunks[0]["metadata"]  # the knowledge base's own (issue 31, item 5)
    assert 0 < chunks[0]["score"] <= 1
    assert json.loads(ragloop("search", "tent", "--json", "-c", "other", env=env).stdout) == []


def test_read_commands_never_create_a_knowledge_base(tmp_path):
    kb = tmp_path / "nope.sqlite"
    for args in (["search", "x", "--kb", str(kb)], ["kb", "stats", "--kb", str(kb)]):
        result = ragloop(*args)
        assert result.returncode == 1
        assert "no knowledge base at" in result.stderr
        assert "ragloop ingest" in result.stderr
    assert not kb.exists()


def test_kb_stats_and_delete(kb_env):
    _tmp_path, docs, env = kb_env
    ragloop("ingest", str(docs), "--embedder", "none", env=env)
    stats = json.loads(ragloop("kb", "stats", "--json", env=env).stdout)
    assert (stats["documents"], stats["dense"]) == (4, False)
    assert "built without embeddings" in stats["dense_off_reason"]
    table = ragloop("kb", "stats", env=env).stdout
    assert "documents" in table
    assert "default" in table
    search = ragloop("search", "tent", env=env)
    assert "keyword search only" in search.stderr
    assert ragloop("kb", "delete", str(docs / "billing.txt"), env=env).returncode == 0
    missing = ragloop("kb", "delete", str(docs / "billing.txt"), env=env)
    assert missing.returncode == 1
    assert "no document" in missing.stderr


def test_ingest_without_links_then_with_them(tmp_path):
    env = {"RAGLOOP_KB": str(tmp_path / "kb.sqlite")}
    files = {
        "packing.md": "# Packing\n\nBring the Alpine Stove and the Gas Lantern.\n",
        "stove.md": "# Alpine Stove\n\nIt burns gas.\n",
        "lantern.md": "# Gas Lantern\n\nIt burns gas too.\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)

    def ingest(name, *options):
        result = ragloop("ingest", str(tmp_path / name), "--embedder", "none", *options, env=env)
        assert result.returncode == 0, result.stderr
        return json.loads(ragloop("kb", "stats", "--json", env=env).stdout)["links"]

    assert ingest("packing.md", "--no-links") == 0
    assert ingest("stove.md", "--no-links") == 0
    # with links, the new title is found in the chunks stored without them
    assert ingest("lantern.md") == 1
    assert "--no-links" in ragloop("ingest", "--help").stdout


def test_the_default_knowledge_base_lives_in_the_user_data_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAGLOOP_KB"}
    env.update(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"))
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ragloop.cli.common import default_kb_location; print(default_kb_location())",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert result.stdout.strip() == str(tmp_path / "data" / "ragloop" / "kb.sqlite")


def test_version_and_help():
    assert ragloop("--version").stdout.startswith("ragloop, version")
    help_text = ragloop("--help").stdout
    for command in ("ingest", "search", "kb"):
        assert command in help_text


def test_ingest_text_now_and_embed_later(kb_env):
    tmp_path, docs, env = kb_env
    ingest = ragloop("ingest", str(docs), "--embedder", "hash", "--vectors", "later", env=env)
    assert ingest.returncode == 0, ingest.stderr
    assert "chunks have no vector yet" in ingest.stdout
    assert "ragloop kb embed" in ingest.stdout
    keyword = sorted(tmp_path.glob("kb.sqlite-keyword-*.arrays"))
    assert len(keyword) == 1  # the ingest prepared the keyword index for the first search
    stats = json.loads(ragloop("kb", "stats", "--json", env=env).stdout)
    assert stats["vectors_missing"] == stats["chunks"] > 0
    hits = json.loads(ragloop("search", "tent weight", "--json", env=env).stdout)
    assert hits[0]["source"] == "camping/tents.md"  # keyword search works meanwhile
    embed = ragloop("kb", "embed", env=env)
    assert embed.returncode == 0, embed.stderr
    assert f"embedded {stats['chunks']} chunks" in embed.stdout
    assert len(list(tmp_path.glob("kb.sqlite-dense-*.arrays"))) == 1  # and embed the vectors' index
    assert sorted(tmp_path.glob("kb.sqlite-keyword-*.arrays")) == keyword
    assert json.loads(ragloop("kb", "stats", "--json", env=env).stdout)["vectors_missing"] == 0
    assert "every chunk has its vector" in ragloop("kb", "embed", env=env).stdout

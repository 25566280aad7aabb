"""Saved index files carry checksums, their shapes and their rows (issue 31, items 10 and 17):
a file damaged in any of these ways is rebuilt from the tables with one warning, and answers
stay those of a clean knowledge base; a folder that cannot take the files (a full disk) costs
one warning line and no traceback."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ragloop.kb.index import saved_arrays
from ragloop.kb.knowledge_base import Document, KnowledgeBase
from ragloop.testing import HashEmbedder

DOCS = [
    Document(
        text=f"{word} notes: the {word} lantern, the {word} tent and the river.",
        source=f"{word}.md",
    )
    for word in ("amber", "birch", "cedar", "delta", "ember", "fjord", "glade", "heath")
]
QUERIES = ["amber lantern", "cedar tent river", "ember fjord", "heath"]


def results(kb: KnowledgeBase) -> dict:
    return {
        (query, mode): [(c.id, round(c.score, 6)) for c in kb.search(query, mode=mode, top_k=4)]
        for query in QUERIES
        for mode in ("bm25", "dense", "hybrid")
    }


def open_kb(path) -> KnowledgeBase:
    return KnowledgeBase(path, embedder=HashEmbedder(64))


@pytest.fixture
def clean(tmp_path):
    """A knowledge base, its indexes saved beside it, and a clean search's results."""
    path = tmp_path / "kb.sqlite"
    with open_kb(path) as kb:
        kb.add_documents(DOCS)
    with open_kb(path) as kb:
        first = results(kb)
    return path, first


def saved_file(path, kind: str):
    (found,) = path.parent.glob(f"kb.sqlite-{kind}-*.arrays")
    return found


def layout(file) -> tuple[int, dict]:
    """Where the arrays start in a saved file, and its header."""
    data = file.read_bytes()
    length = int.from_bytes(data[16:24], "little")
    prefix = 24 if data.startswith(b"RAGLOOP-ARRAYS-1") else 28  # before checksums: no CRC
    header = json.loads(data[prefix : prefix + length])
    return -(-(prefix + length) // 64) * 64, header


def overwrite(file, array: str, values: np.ndarray, at: int = 0) -> None:
    start, header = layout(file)
    entry = header["arrays"][array]
    with open(file, "r+b") as out:
        out.seek(start + entry["offset"] + at)
        out.write(values.tobytes())


def flip_bytes(file, array):
    start, header = layout(file)
    entry = header["arrays"][array]
    data = bytearray(file.read_bytes())
    for i in range(start + entry["offset"], start + entry["offset"] + 64):
        data[i] ^= 0x41
    file.write_bytes(bytes(data))


def rewrite(file, change) -> None:
    """Write the file again through saved_arrays.save (its checksums right), changed."""
    arrays, info = saved_arrays.load(file)
    arrays = {name: np.array(a) for name, a in arrays.items()}
    change(arrays)
    os.remove(file)  # the old file is mapped: write a new one
    assert saved_arrays.save(file, arrays, info)


DAMAGE = {
    "dense flipped bytes": ("dense", lambda f: flip_bytes(f, "columns")),
    "dense NaN written": ("dense", lambda f: overwrite(f, "columns", np.full(8, np.nan, "<f4"))),
    "dense reversed rows": (
        "dense",
        lambda f: overwrite(f, "pks", np.ascontiguousarray(saved_arrays.load(f)[0]["pks"][::-1])),
    ),
    "keyword flipped bytes": ("keyword", lambda f: flip_bytes(f, "weights")),
    "keyword reversed rows": (
        "keyword",
        lambda f: overwrite(f, "pks", np.ascontiguousarray(saved_arrays.load(f)[0]["pks"][::-1])),
    ),
    # the checksums right, the contents not: the rows and shapes are checked too
    "reversed rows, checksums right": (
        "dense",
        lambda f: rewrite(f, lambda a: a.update(pks=a["pks"][::-1].copy())),
    ),
    "wrong shape, checksums right": (
        "dense",
        lambda f: rewrite(f, lambda a: a.update(columns=a["columns"][:-1].copy())),
    ),
    "keyword postings cut, checksums right": (
        "keyword",
        lambda f: rewrite(f, lambda a: a.update(docs=a["docs"][:-1].copy())),
    ),
    "keyword term frequencies cut, checksums right": (
        "keyword",
        lambda f: rewrite(f, lambda a: a.update(tfs=a["tfs"][:-1].copy())),
    ),
    "keyword chunk lengths cut, checksums right": (
        "keyword",
        lambda f: rewrite(f, lambda a: a.update(lengths=a["lengths"][:-1].copy())),
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_index_is_rebuilt_from_the_tables_with_one_warning(clean, damage, caplog):
    path, first = clean
    kind, hurt = DAMAGE[damage]
    hurt(saved_file(path, kind))
    caplog.set_level(logging.WARNING, logger="ragloop")
    with open_kb(path) as kb:
        assert results(kb) == first
    warnings = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "rebuilding it from the knowledge base" in warnings[0]
    assert not any(r.exc_info for r in caplog.records)
    caplog.clear()
    with open_kb(path) as kb:  # saved whole again: the next process maps it, quietly
        assert results(kb) == first
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert saved_arrays.load(saved_file(path, kind)) is not None


def test_a_file_is_on_the_disk_before_its_name_and_the_folder_after(tmp_path, monkeypatch):
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor):
        calls.append("fsync folder" if stat.S_ISDIR(os.fstat(descriptor).st_mode) else "fsync file")
        real_fsync(descriptor)

    def replace(source, target):
        calls.append("rename")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    assert saved_arrays.save(tmp_path / "x.arrays", {"a": np.arange(3)}, {})
    assert calls == ["fsync file", "rename", "fsync folder"]


FULL_DISK = textwrap.dedent(
    """
    import errno, sys
    from ragloop.kb.index import saved_arrays

    def full(out, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    saved_arrays._write_array = full
    sys.argv = ["ragloop", *sys.argv[1:]]
    from ragloop.cli import run
    run()
    """
)


def test_a_full_disk_costs_one_warning_line_and_no_traceback(tmp_path):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder="hash") as kb:
        kb.add_documents(DOCS)
    for old in tmp_path.glob("*.arrays"):
        os.remove(old)
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK, "search", "amber lantern", "--kb", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "amber.md" in result.stdout
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "could not save the search index" in lines[0]
    assert "No space left on device" in lines[0]
    assert not list(tmp_path.glob("*.arrays"))
    assert not list(tmp_path.glob("*.tmp"))

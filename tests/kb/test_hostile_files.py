"""Ingesting hostile files: binary, huge, empty, wrongly encoded, unreadable (a FIFO, a
folder named like a file, a BOM followed by bytes of another encoding), symlinks that leave the
root. Each is skipped with a reason and the rest of the folder is ingested. The kill -9 and
concurrent-reader cases live in test_knowledge_base.py."""

from __future__ import annotations

import asyncio
import os

from ragloop import KnowledgeBase


async def test_every_hostile_file_is_skipped_with_a_reason(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nOutside the root.")
    (root / "good.md").write_text("# Tents\n\nTents are guaranteed for three years.")
    (root / "latin1.txt").write_bytes("Café crème, déjà vu: the tent is brûlée.".encode("cp1252"))
    files = {
        "binary.md": bytes(range(256)) * 10,
        "controls.txt": b"\x01\x02\x03\x04\x05\x06" * 500,
        "huge.txt": b"tent " * 60_000,  # over the 100 kB limit set below
        "empty.md": b"",
        "blank.md": b"   \n\n\t  \n",
        "bom-then-junk.txt": b"\xff\xfeA",  # a UTF-16 BOM, then an odd byte
        "bad.json": b'{"title": "x", "body": ',
        "nested.json": b"[" * 100_000 + b"]" * 100_000,
        "no-extension": b"plain text",
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    (root / "folder.md").mkdir()
    os.mkfifo(root / "pipe.md")  # reading it would block forever
    (root / "link.md").symlink_to(outside / "secret.md")
    (root / "linkdir").symlink_to(outside)
    (root / "dangling.md").symlink_to(tmp_path / "missing.md")

    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None, max_file_bytes=100_000)
    report = await asyncio.wait_for(asyncio.to_thread(kb.ingest, root), timeout=60)

    assert report.added == 2  # good.md, latin1.txt
    skipped = {os.path.basename(path): reason for path, reason in report.skipped}
    for name in files:
        assert name in skipped, name
        assert skipped[name]
    assert "limit" in skipped["huge.txt"]
    assert "empty" in skipped["empty.md"]
    assert "decode" in skipped["bom-then-junk.txt"]
    assert "outside" in skipped["link.md"]
    assert "outside" in skipped["linkdir"]
    assert "pipe.md" in skipped
    sources = {c.source for c in kb.search("tent", mode="bm25")}
    assert all("outside" not in s and "secret" not in s for s in sources)
    assert kb.search("crème", mode="bm25")  # cp1252 decoded, not mangled
    assert kb.store.integrity_check() == "ok"

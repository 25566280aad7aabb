"""Reading a file is bounded by max_file_bytes (issue 31, item 17): a file that grows while it is
read is never read past max_file_bytes + 1 bytes, and is skipped with the reason."""

from __future__ import annotations

import builtins

from ragloop.kb.ingest import discover as ingest
from ragloop.kb.knowledge_base import KnowledgeBase

LIMIT = 64 * 1024


def test_a_file_growing_while_it_is_read_is_read_to_the_limit_only(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    log = docs / "growing.txt"
    log.write_text("a line of the log\n" * 100)  # small when its size is looked at
    (docs / "other.txt").write_text("Another file, read as usual.\n")
    returned: list[int] = []

    class Growing:
        """The real file, which another writer extends by 4 MB once reading has begun."""

        def __init__(self, file):
            self.file = file

        def read(self, size=-1):
            if not returned:
                with builtins.open(log, "ab") as writer:
                    writer.write(b"more of the log\n" * (4 * 1024 * 1024 // 16))
            data = self.file.read(size)
            returned.append(len(data))
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    def opening(path, mode="r", *args, **kwargs):
        real = builtins.open(path, mode, *args, **kwargs)  # noqa: SIM115 (closed by the caller)
        return Growing(real) if str(path) == str(log) else real

    monkeypatch.setattr(ingest, "open", opening, raising=False)
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=None, max_file_bytes=LIMIT) as kb:
        report = kb.ingest(docs)
    assert sum(returned) == LIMIT + 1  # never the 4 MB the file holds by then
    assert report.added == 1
    ((path, reason),) = report.skipped
    assert path.endswith("growing.txt")
    assert "grew past the 0.1 MB limit (max_file_bytes)" in reason


def test_a_file_known_too_big_is_not_opened(tmp_path, monkeypatch):
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (LIMIT + 10))
    opened: list[str] = []

    def opening(path, *args, **kwargs):
        opened.append(str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(ingest, "open", opening, raising=False)
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=None, max_file_bytes=LIMIT) as kb:
        report = kb.ingest(big)
    assert "over the 0.1 MB limit" in report.skipped[0][1]
    assert opened == []

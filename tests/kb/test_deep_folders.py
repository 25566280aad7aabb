"""Folders are walked without a recursion limit (issue 31, item 8): a folder 1,000 levels deep
is ingested with everything after it, and a real symlink loop is still called one."""

from __future__ import annotations

import os
from pathlib import Path

from ragloop.kb.ingest.discover import discover
from ragloop.kb.knowledge_base import KnowledgeBase

DEPTH = 1000  # "d/" a level: a path of about 2 KB, under PATH_MAX (4 KB)


def make_deep(top: Path) -> Path:
    """``top/d/d/.../d`` (``DEPTH`` levels), made one level at a time (os.makedirs recurses)."""
    folder = str(top)
    os.mkdir(folder)
    for _ in range(DEPTH - 1):
        folder = os.path.join(folder, "d")
        os.mkdir(folder)
    return Path(folder)


def remove_deep(top: Path) -> None:
    """Removed here, from the bottom up: shutil.rmtree (pytest's clean-up) recurses too."""
    folders = [str(top)]
    for _ in range(DEPTH - 1):
        folders.append(os.path.join(folders[-1], "d"))
    for folder in reversed(folders):
        for name in os.listdir(folder):
            if name != "d":
                os.remove(os.path.join(folder, name))
        os.rmdir(folder)


def test_a_folder_1000_levels_deep_is_walked_with_its_siblings(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# First\n\nBefore the deep folder.\n")
    bottom = make_deep(docs / "deep")
    try:
        (bottom / "bottom.md").write_text("# Bottom\n\nThe Glow lamp lives at the bottom.\n")
        assert len(os.fsencode(bottom / "bottom.md")) < os.pathconf("/", "PC_PATH_MAX")
        (docs / "zz.md").write_text("# Last\n\nAfter the deep folder.\n")
        (docs / "zz").mkdir()
        (docs / "zz" / "sibling.md").write_text("# Sibling\n\nA folder after the deep one.\n")
        found = discover([docs])
        assert found.skipped == []
        names = [c.path.name for c in found.found]
        assert names == ["a.md", "zz.md", "bottom.md", "sibling.md"]  # as os.walk goes
        with KnowledgeBase(tmp_path / "kb.sqlite", embedder=None) as kb:
            report = kb.ingest(docs)
            assert (report.added, report.skipped) == (4, [])
            hit = kb.search("Glow lamp bottom", mode="bm25")[0]
            assert hit.source == "deep/" + "d/" * (DEPTH - 1) + "bottom.md"
    finally:
        remove_deep(docs / "deep")


def test_a_symlink_loop_is_still_reported_as_one(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "one").symlink_to(docs / "two")
    (docs / "two").symlink_to(docs / "one")
    (docs / "self.md").symlink_to(docs / "self.md")
    (docs / "z.md").write_text("After the loops.\n")
    found = discover([docs])
    assert [c.path.name for c in found.found] == ["z.md"]
    assert {Path(p).name: r for p, r in found.skipped} == {
        "one": "symlink loop",
        "two": "symlink loop",
        "self.md": "symlink loop",
    }

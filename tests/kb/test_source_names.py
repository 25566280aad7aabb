"""No file is lost for its name (issue 31, item 6): several folders in one run, one folder after
another, and the same folder again."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop.kb.knowledge_base import Document, KnowledgeBase

FOLDERS = ("library", "tutorial", "howto", "faq", "reference")


@pytest.fixture
def pydocs(tmp_path: Path) -> Path:
    """Five folders like the Python docs': two logging.html, an index.html in each."""
    top = tmp_path / "python"
    for folder in FOLDERS:
        (top / folder).mkdir(parents=True)
        (top / folder / "index.html").write_text(
            f"<html><title>{folder}</title><body><p>The {folder} index page.</p></body></html>"
        )
    for folder in ("library", "howto"):
        (top / folder / "logging.html").write_text(
            f"<html><body><h1>Logging {folder}</h1><p>Logging in the {folder}.</p></body></html>"
        )
    return top


def kb_at(tmp_path: Path) -> KnowledgeBase:
    return KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)


def test_five_folders_in_one_run_keep_every_file(tmp_path, pydocs):
    with kb_at(tmp_path) as kb:
        report = kb.ingest([pydocs / f for f in FOLDERS])
        assert report.skipped == []
        assert report.added == 7
        assert kb.store.sources("default") == sorted(
            [f"{f}/index.html" for f in FOLDERS] + ["library/logging.html", "howto/logging.html"]
        )
        again = kb.ingest([pydocs / f for f in FOLDERS])
        assert (again.added, again.updated, again.unchanged) == (0, 0, 7)


def test_folders_one_run_after_another_never_replace_each_other(tmp_path, pydocs):
    with kb_at(tmp_path) as kb:
        reports = [kb.ingest(pydocs / f) for f in ("tutorial", "faq", "howto")]
        assert [(r.added, r.updated, r.skipped) for r in reports] == [
            (1, 0, []),
            (1, 0, []),
            (2, 0, []),
        ]
        sources = kb.store.sources("default")
        assert sources == ["faq/index.html", "howto/index.html", "index.html", "logging.html"]
        found = {c.metadata.get("title") for c in kb.search("index page", top_k=10, mode="bm25")}
        assert {"tutorial", "faq", "howto"} <= found
        # each file keeps its source: the same folders again change nothing
        for folder in ("tutorial", "faq", "howto"):
            assert kb.ingest(pydocs / folder).unchanged >= 1
        assert kb.store.sources("default") == sources
        # given together now, they are still the same documents (no duplicates)
        together = kb.ingest([pydocs / f for f in ("tutorial", "faq", "howto")])
        assert (together.added, together.updated, together.unchanged) == (0, 0, 4)
        assert kb.store.sources("default") == sources


def test_the_same_folder_again_updates_in_place(tmp_path, pydocs):
    with kb_at(tmp_path) as kb:
        kb.ingest(pydocs / "howto")
        (pydocs / "howto" / "logging.html").write_text("<p>Logging, rewritten.</p>")
        report = kb.ingest(pydocs / "howto")
        assert (report.added, report.updated, report.unchanged) == (0, 1, 1)
        assert kb.store.sources("default") == ["index.html", "logging.html"]
        assert "rewritten" in kb.search("rewritten", mode="bm25")[0].text


def test_a_file_gone_is_replaced_and_a_text_document_is_not(tmp_path, pydocs):
    with kb_at(tmp_path) as kb:
        kb.add_documents([Document(text="Typed in by hand.", source="index.html")])
        kb.ingest(pydocs / "faq")
        assert kb.store.sources("default") == ["faq/index.html", "index.html"]
        # faq/index.html's file moves away: a new file may take its source
        moved = tmp_path / "elsewhere" / "faq"
        moved.parent.mkdir()
        (pydocs / "faq").rename(moved)
        (pydocs / "faq").mkdir()
        (pydocs / "faq" / "index.html").write_text("<p>A new faq index.</p>")
        report = kb.ingest(pydocs / "faq")
        assert (report.added, report.updated) == (0, 1)
        assert kb.store.sources("default") == ["faq/index.html", "index.html"]


def test_a_text_or_upload_never_replaces_a_files_document(tmp_path, pydocs):
    """Issue 58, item 9: an upload named as a watched (or ingested) file's document is skipped
    with the reason, so the file's document stays and no second copy appears later; once the
    file is gone, its source is free."""
    with kb_at(tmp_path) as kb:
        kb.ingest(pydocs / "faq")
        uploaded = kb.add_files([("index.html", b"<p>Uploaded over it.</p>")])
        typed = kb.add_documents([Document(text="Typed over it.", source="index.html")])
        for report in (uploaded, typed):
            assert (report.added, report.updated) == (0, 0)
            ((source, reason),) = report.skipped
            assert source == "index.html"
            assert str(pydocs / "faq" / "index.html") in reason
        assert kb.search("faq index page", mode="bm25")[0].content == "The faq index page."
        assert kb.ingest(pydocs / "faq").unchanged == 1  # and no second copy beside it
        assert kb.store.sources("default") == ["index.html"]
        (pydocs / "faq" / "index.html").unlink()
        assert kb.add_files([("index.html", b"<p>Uploaded now.</p>")]).updated == 1

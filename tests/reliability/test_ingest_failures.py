"""Issue 17, items 1 and 2: one bad file or folder never costs the good ones.

Every case below aborted the whole ingest (storing nothing) or was silently left out, and
``ingest(sync=True)`` then deleted the documents it had from a folder it could not read. Now each
is a ``skipped`` entry with its reason, the good files are stored, and sync keeps what it could
not read. Cases that need file permissions run as an unprivileged user (tests/reliability/
unprivileged.py), since root reads everything.
"""

from __future__ import annotations

import io
import os
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragloop import KnowledgeBase
from ragloop.kb.ingest.discover import SkipFile, load_file
from tests.reliability.unprivileged import run_unprivileged, shared_tmp

GOOD = "# Tents\n\nTents are guaranteed for three years."


def _pdf(stream: bytes, filters: bytes = b"") -> bytes:
    """A one-page PDF whose page content is ``stream`` (with ``/Filter filters``)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d%s >>\nstream\n%s\nendstream"
        % (len(stream), b" /Filter " + filters if filters else b"", stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return out


TEXT_PDF = _pdf(b"BT /F1 12 Tf 72 720 Td (Tents are guaranteed for three years.) Tj ET")


def _deep_file(root: Path, depth: int = 20) -> None:
    """A file whose path is longer than PATH_MAX (4096), made one folder at a time."""
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d" * 250, dir_fd=fd)
        inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    out = os.open("deep.md", os.O_CREAT | os.O_WRONLY, dir_fd=fd)
    os.write(out, b"# Deep\n\nA tent far down.")
    os.close(out)
    os.close(fd)


def test_one_bad_file_never_aborts_the_ingest(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text(GOOD)
    # a symlink loop, in both forms
    (root / "a.md").symlink_to(root / "b.md")
    (root / "b.md").symlink_to(root / "a.md")
    (root / "loopdir").symlink_to(root / "loopdir")
    # a file name that is not UTF-8
    with open(os.fsencode(root) + b"/caf\xe9.md", "w") as out:
        out.write("# Cafe\n\nA tent in a cafe.")
    # PDFs pypdf rejects with LimitReachedError, NotImplementedError and DependencyError
    (root / "bomb.pdf").write_bytes(_pdf(zlib.compress(b" " * 200_000_000, 9), b"/FlateDecode"))
    (root / "filter.pdf").write_bytes(_pdf(b"xx", b"/NoSuchFilter"))
    (root / "jbig2.pdf").write_bytes(_pdf(b"xx", b"/JBIG2Decode"))
    (root / "text.pdf").write_bytes(TEXT_PDF)
    _deep_file(root)

    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    report = kb.ingest(root)

    skipped = dict(report.skipped)
    stored = set(kb.store.sources("default"))
    assert stored == {"good.md", "text.pdf"}
    assert skipped[str(root / "a.md")] == "symlink loop"
    assert "loop" in skipped[str(root / "loopdir")]
    assert skipped[f"{root}/caf\\xe9.md"] == "file name is not valid UTF-8"
    for name, error in [
        ("bomb.pdf", "LimitReachedError"),
        ("filter.pdf", "NotImplementedError"),
        ("jbig2.pdf", "DependencyError"),
    ]:
        assert error in skipped[str(root / name)], name
    deep = [reason for path, reason in report.skipped if path.startswith(str(root / ("d" * 250)))]
    assert deep
    assert all("too long" in reason for reason in deep)
    assert kb.store.integrity_check() == "ok"


def test_a_lone_surrogate_escape_is_replaced_not_fatal(tmp_path):
    """JSON may spell a lone UTF-16 surrogate (``"\\ud800"``), which no UTF-8 text can hold:
    the character becomes U+FFFD and the record is kept."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text(GOOD)
    (root / "rows.json").write_text('[{"title": "Tarp \\udfff", "text": "tarp \\ud800 pegs"}]')
    (root / "rows.jsonl").write_text('{"text": "stakes \\ud800 mallet"}\n')
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    report = kb.ingest(root)
    assert report.added == 3
    assert not report.skipped
    assert "tarp \ufffd pegs" in kb.search("tarp pegs", mode="bm25")[0].content
    assert kb.search("mallet", mode="bm25")


def test_a_document_given_as_text_with_a_surrogate_is_stored():
    from ragloop import Document

    kb = KnowledgeBase.in_memory(embedder=None)
    report = kb.add_documents(
        [Document(text="bad \udc80 byte", source="a"), Document(text="tents", source="b\udc80")]
    )
    assert report.added == 1
    assert report.skipped == [("b\\x80", "the name is not valid UTF-8")]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_pdfs_are_parsed_or_skipped(tmp_path_factory, data):
    """Random byte edits of a valid PDF (the way 12 of 1,000 mutants crashed the ingest)."""
    pdf = bytearray(TEXT_PDF)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(pdf) - 1))
        action = data.draw(st.sampled_from(["flip", "delete", "insert"]))
        if action == "flip":
            pdf[at] = data.draw(st.integers(0, 255))
        elif action == "delete":
            del pdf[at : at + data.draw(st.integers(1, 40))]
        else:
            pdf[at:at] = data.draw(
                st.sampled_from([b"/Filter /LZWDecode ", b"999999999 ", b"<<", b"/Length -1 "])
            )
    path = tmp_path_factory.mktemp("pdf") / "mutant.pdf"
    path.write_bytes(bytes(pdf))
    try:
        loaded = load_file(path, max_bytes=10**8, encodings=("cp1252",))
    except SkipFile as skipped:
        reason = str(skipped)
    else:
        reason = "parsed" if loaded.document.blocks else ""
    assert reason


# -- unreadable folders and sync (item 2) ------------------------------------------------------


def _ingest(kb_path: str, root: str, sync: bool) -> tuple[list[tuple[str, str]], int, list[str]]:
    with KnowledgeBase(kb_path, embedder=None) as kb:
        report = kb.ingest(root, sync=sync)
        return report.skipped, report.removed, kb.store.sources("default")


def test_an_unreadable_folder_is_reported_and_sync_keeps_its_documents():
    with shared_tmp() as tmp:
        root = tmp / "docs"
        (root / "team").mkdir(parents=True)
        (root / "good.md").write_text(GOOD)
        (root / "team" / "plan.md").write_text("# Plan\n\nPitch the tents at noon.")
        (root / "team" / "gone.md").write_text("# Gone\n\nThis file will be deleted.")
        kb_dir = tmp / "kb"
        kb_dir.mkdir(mode=0o777)
        kb_dir.chmod(0o777)
        kb_path = str(kb_dir / "kb.sqlite")

        skipped, removed, sources = run_unprivileged(_ingest, kb_path, str(root), False)
        assert (skipped, removed, len(sources)) == ([], 0, 3)

        (root / "team" / "gone.md").unlink()
        (root / "team").chmod(0)
        skipped, removed, sources = run_unprivileged(_ingest, kb_path, str(root), True)

        assert skipped == [(str(root / "team"), "cannot read folder: Permission denied")]
        assert removed == 0  # not even gone.md: sync cannot know it is gone
        assert len(sources) == 3

        (root / "team").chmod(0o755)  # readable again: now sync sees gone.md is gone
        skipped, removed, sources = run_unprivileged(_ingest, kb_path, str(root), True)
        assert (skipped, removed, len(sources)) == ([], 1, 2)


def test_an_unreadable_file_is_reported_and_sync_keeps_its_document():
    with shared_tmp() as tmp:
        root = tmp / "docs"
        root.mkdir()
        (root / "good.md").write_text(GOOD)
        (root / "private.md").write_text("# Private\n\nOnly for the owner.")
        kb_dir = tmp / "kb"
        kb_dir.mkdir()
        kb_dir.chmod(0o777)
        kb_path = str(kb_dir / "kb.sqlite")
        run_unprivileged(_ingest, kb_path, str(root), False)
        (root / "private.md").chmod(0)
        skipped, removed, sources = run_unprivileged(_ingest, kb_path, str(root), True)
        assert skipped == [(str(root / "private.md"), "permission denied")]
        assert removed == 0
        assert len(sources) == 2


def test_sync_never_removes_what_a_too_long_path_hid(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text(GOOD)
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    kb.ingest(root)
    _deep_file(root)
    report = kb.ingest(root, sync=True)
    assert report.removed == 0
    assert report.skipped


@pytest.mark.parametrize("name", ["loop.md", "missing.md"])
def test_a_broken_link_given_directly_is_skipped(tmp_path, name):
    link = tmp_path / name
    link.symlink_to(link if name == "loop.md" else tmp_path / "nowhere.md")
    report = KnowledgeBase.in_memory(embedder=None).ingest([link, io.__file__])
    assert len(report.skipped) == 2

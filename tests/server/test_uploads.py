"""Uploads keep each part's relative path; a bad or repeated name refuses the whole request
with a 422 naming the part, before anything is ingested (issue 31, items 7 and 12)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ragloop import KnowledgeBase
from ragloop.core.errors import ConfigError
from ragloop.server.service import Service
from tests.server.conftest import auth, build_kb, key_settings, serving

GOOD = ("good.md", b"# Good\n\nThe Glow lamp runs for 40 hours.", "text/markdown")


@pytest.fixture
def own_server(tmp_path) -> Iterator[tuple[str, Service]]:
    """A server over a knowledge base of its own: these tests write to it."""
    with serving(build_kb(tmp_path / "kb.sqlite"), key_settings(), tmp_path) as running:
        yield running


def upload(url: str, parts: list[tuple[str, bytes, str]]) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/documents/files",
        files=[("files", part) for part in parts],
        data={"collection": "public"},
        headers=auth("root"),
    )


def sources(service: Service) -> list[str]:
    return service.kb.store.sources("public")


def test_two_files_of_one_name_in_two_folders_are_both_kept(own_server):
    url, service = own_server
    reply = upload(
        url,
        [
            ("a/notes.md", b"# Notes\n\nThe Glow lamp runs for 40 hours.", "text/markdown"),
            ("b/notes.md", b"# Notes\n\nThe Ember stove boils a litre.", "text/markdown"),
        ],
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["added"] == 2
    assert {"a/notes.md", "b/notes.md"} <= set(sources(service))
    hit = service.kb.search("Ember stove litre", mode="bm25", collection="public")[0]
    assert hit.source == "b/notes.md"
    assert "root" not in hit.metadata  # no temporary folder of the server's in the metadata
    assert not any("ragloop-upload" in str(v) for v in hit.metadata.values())
    # the same names again: updated in place
    again = upload(url, [("a/notes.md", b"# Notes\n\nThe Glow lamp, rewritten.", "text/markdown")])
    assert (again.json()["added"], again.json()["updated"]) == (0, 1)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (".", "names no file"),
        ("..", "'..'"),
        ("  ", "empty"),
        ("../outside.md", "'..'"),
        ("a/../../outside.md", "'..'"),
        ("/etc/notes.md", "absolute"),
        ("x" * 256 + ".md", "over 255 bytes"),
        ("a/" + "é" * 128 + ".md", "over 255 bytes"),
    ],
)
def test_a_bad_name_is_a_422_naming_the_part_and_nothing_is_ingested(own_server, name, reason):
    url, service = own_server
    before = sources(service)
    reply = upload(url, [GOOD, (name, b"Some text.", "text/plain")])
    assert reply.status_code == 422, reply.text
    detail = reply.json()["detail"]
    assert "part 1" in detail, detail
    assert reason in detail, detail
    assert sources(service) == before  # the good file of the request was not ingested


@pytest.mark.parametrize(("name", "reason"), [("bad\0name.md", "NUL"), ("", "empty")])
def test_names_a_client_library_would_not_send_are_a_422(own_server, name, reason):
    """Written by hand: httpx escapes a NUL and leaves out an empty file name."""
    url, service = own_server
    before = sources(service)
    boundary = "XyZ"
    body = (
        b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{filename}"'
            f"\r\nContent-Type: text/markdown\r\n\r\nSome text.\r\n".encode()
            for filename in ("good.md", name)
        )
        + f"--{boundary}--\r\n".encode()
    )
    reply = httpx.post(
        f"{url}/v1/documents/files",
        content=body,
        headers={**auth("root"), "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert reply.status_code == 422, reply.text
    assert "part 1" in reply.json()["detail"]
    assert reason in reply.json()["detail"]
    assert sources(service) == before


def test_two_parts_of_one_name_are_refused_before_either_is_ingested(own_server):
    url, service = own_server
    before = sources(service)
    reply = upload(
        url,
        [
            ("notes.md", b"# One\n\nFirst.", "text/markdown"),
            ("./notes.md", b"# Two\n\nSecond.", "text/markdown"),
        ],
    )
    assert reply.status_code == 422, reply.text
    assert "'notes.md'" in reply.json()["detail"]
    assert "parts 0 and 1" in reply.json()["detail"]
    assert sources(service) == before


def test_add_files_checks_names_in_the_library_too(tmp_path):
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=None) as kb:
        with pytest.raises(ConfigError, match="part 0"):
            kb.add_files([("../x.md", b"text")])
        with pytest.raises(ConfigError, match="absolute"):
            kb.add_files([("C:\\x.md", b"text")])
        report = kb.add_files([("a\\notes.md", b"Lamps."), ("tool.exe", b"MZ")])
        assert kb.store.sources("default") == ["a/notes.md"]
        assert report.skipped == [("tool.exe", "unsupported file type '.exe'")]

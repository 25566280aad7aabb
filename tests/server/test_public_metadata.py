"""Chunk metadata shown to clients (issue 31, item 5): the knowledge base's own keys (the
folder a file came from, an upload's temporary folder, the file's times) never leave the
server: not in search, ask, retrieve or chunk responses, nor in the CLI's --json output."""

from __future__ import annotations

import json
import tempfile

import httpx
import pytest
from click.testing import CliRunner

from ragloop import KnowledgeBase
from ragloop.cli import main as cli
from ragloop.kb.metadata import INTERNAL_METADATA, is_absolute_path, public_metadata
from tests.server.conftest import auth, key_settings, serving

LEAKS = ("mtime_ns", "ctime_ns", '"root"', "ragloop-upload-")


@pytest.fixture
def folder_kb(tmp_path):
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "stoves.md").write_text("# Stoves\n\nThe Ember stove boils a litre in 3 minutes.\n")
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder="hash") as kb:
        kb.ingest(folder, collection="public")
        stored = kb.search("Ember stove", top_k=1)[0].metadata
    assert stored["root"] == str(folder.resolve())  # kept in the knowledge base, for ingest
    return path


def assert_private(text: str, tmp_path) -> None:
    assert str(tmp_path) not in text
    assert str(tmp_path.resolve()) not in text
    assert tempfile.gettempdir() + "/" not in text
    for leak in LEAKS:
        assert leak not in text


def test_no_server_path_or_file_time_reaches_a_client(folder_kb, tmp_path):
    with serving(folder_kb, key_settings(), tmp_path / "served") as (url, _):
        alice, root = auth("alice"), auth("root")
        upload = httpx.post(
            f"{url}/v1/documents/files",
            files={
                "files": ("lamps.md", b"# Lamps\n\nThe Glow lamp runs 40 hours.", "text/markdown")
            },
            data={"collection": "public"},
            headers=root,
        )
        assert upload.json()["added"] == 1, upload.text
        texts = []
        for query in ("Ember stove litre", "Glow lamp hours"):
            found = httpx.post(f"{url}/v1/search", json={"query": query}, headers=alice)
            chunks = found.json()["chunks"]
            assert chunks
            assert chunks[0]["metadata"]["format"] == "md"  # the document's own keys stay
            texts.append(found.text)
            asked = httpx.post(f"{url}/v1/ask", json={"question": f"{query}?"}, headers=alice)
            texts.append(asked.text)
            retrieved = httpx.post(f"{url}/v1/retrieve", json={"query": query}, headers=alice)
            texts.append(retrieved.text)
            one = httpx.get(f"{url}/v1/chunks/{chunks[0]['id']}", headers=alice)
            texts.append(one.text)
            streamed = httpx.post(
                f"{url}/v1/ask",
                json={"question": f"{query}?"},
                headers={**alice, "Accept": "text/event-stream"},
            )
            texts.append(streamed.text)
        for text in texts:
            assert_private(text, tmp_path)


def test_the_cli_json_output_drops_them_too(folder_kb, tmp_path):
    for args in (["search", "Ember stove"], ["ask", "How fast does the Ember stove boil?"]):
        result = CliRunner().invoke(cli, [*args, "--kb", str(folder_kb), "--json"])
        assert result.exit_code == 0, result.output
        assert_private(result.output, tmp_path)
        json.loads(result.output)


def test_public_metadata():
    shown = public_metadata(
        {
            "root": "/srv/docs",
            "mtime_ns": 1,
            "ctime_ns": 2,
            "format": "md",
            "home": "~/notes",
            "windows": "C:\\docs\\a.md",
            "url": "https://example.org/a",
            "relative": "library/os.html",
            "note": "~30 pages",
        }
    )
    assert shown == {
        "format": "md",
        "url": "https://example.org/a",
        "relative": "library/os.html",
        "note": "~30 pages",
    }
    assert {"root", "mtime_ns", "ctime_ns"} <= INTERNAL_METADATA
    assert not is_absolute_path(3)

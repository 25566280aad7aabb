"""A document needs a source and a collection (issue 31, item 9): an empty or blank one is a
422 with a message on the server and an error naming the field in the library, before anything
is stored."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from pydantic import ValidationError

from ragloop import Document, KnowledgeBase
from ragloop.core.errors import ConfigError
from ragloop.server.service import Service
from tests.server.conftest import auth, build_kb, key_settings, serving


@pytest.fixture
def own_server(tmp_path) -> Iterator[tuple[str, Service]]:
    with serving(build_kb(tmp_path / "kb.sqlite"), key_settings(), tmp_path) as running:
        yield running


GOOD = {"source": "stoves.md", "text": "The Ember stove boils a litre in four minutes."}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"documents": [GOOD, {"source": "", "text": "Nameless."}]}, "source"),
        ({"documents": [GOOD, {"source": "   ", "text": "Nameless."}]}, "source"),
        ({"documents": [GOOD], "collection": ""}, "collection"),
        ({"documents": [GOOD], "collection": " \t"}, "collection"),
    ],
)
def test_an_empty_source_or_collection_is_a_422(own_server, body, field):
    url, service = own_server
    before = service.kb.store.stats().documents
    reply = httpx.post(f"{url}/v1/documents", json=body, headers=auth("root"))
    assert reply.status_code == 422, reply.text
    assert field in reply.text
    assert service.kb.store.stats().documents == before


def test_an_upload_into_a_blank_collection_is_a_422(own_server):
    url, service = own_server
    before = service.kb.store.stats().documents
    reply = httpx.post(
        f"{url}/v1/documents/files",
        files={"files": ("lamps.md", b"# Lamps\n\nThe Glow lamp.", "text/markdown")},
        data={"collection": " "},
        headers=auth("root"),
    )
    assert reply.status_code == 422, reply.text
    assert "collection" in reply.json()["detail"]
    assert service.kb.store.stats().documents == before


def test_the_library_names_the_field(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Some text.")
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=None) as kb:
        with pytest.raises(ValidationError, match="source"):
            kb.add_documents([GOOD, {"source": "", "text": "Nameless."}])
        with pytest.raises(ValidationError, match="source"):
            Document(source=" ", text="Nameless.")
        for collection in ("", "  "):
            with pytest.raises(ConfigError, match="collection"):
                kb.add_documents([GOOD], collection=collection)
            with pytest.raises(ConfigError, match="collection"):
                kb.ingest(docs, collection=collection)
            with pytest.raises(ConfigError, match="collection"):
                kb.add_files([("a.md", b"text")], collection=collection)
        assert kb.store.stats().documents == 0  # the good document of a refused list too

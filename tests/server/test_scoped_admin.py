"""An admin key limited to collections writes, deletes, reads runs and hears changes inside
them only (issue 58, item 1): uvicorn on 127.0.0.1 over a knowledge base of the test's own,
with the keys of conftest (pubadmin: admin of ``public``; root: admin of everything)."""

from __future__ import annotations

import httpx
import pytest

from ragloop import Document, KnowledgeBase
from tests.server.conftest import auth, build_kb, key_settings, serving


@pytest.fixture
def scoped(tmp_path):
    path = build_kb(tmp_path / "kb.sqlite")
    with KnowledgeBase(path, embedder="hash") as kb:  # one source in both collections
        shared = Document(source="plans.md", text="The plans for the new tent range.")
        kb.add_documents([shared], collection="public")
        kb.add_documents([shared], collection="secret")
    with serving(path, key_settings(), tmp_path) as running:
        yield running


def sources(url: str, collection: str) -> set[str]:
    listed = httpx.get(
        f"{url}/v1/documents", params={"collection": collection}, headers=auth("root")
    )
    return {d["source"] for d in listed.json()["documents"]}


def test_a_scoped_admin_adds_only_to_its_collections(scoped):
    url, _ = scoped
    doc = {"source": "intruder.md", "text": "Written by the public admin."}
    refused = httpx.post(
        f"{url}/v1/documents",
        json={"collection": "secret", "documents": [doc]},
        headers=auth("pubadmin"),
    )
    assert refused.status_code == 403, refused.text
    assert "secret" in refused.json()["detail"]
    uploaded = httpx.post(
        f"{url}/v1/documents/files",
        files={"files": ("intruder.md", b"# Intruder\n\nUploaded by the public admin.")},
        data={"collection": "secret"},
        headers=auth("pubadmin"),
    )
    assert uploaded.status_code == 403, uploaded.text
    assert "intruder.md" not in sources(url, "secret")
    allowed = httpx.post(
        f"{url}/v1/documents",
        json={"collection": "public", "documents": [doc]},
        headers=auth("pubadmin"),
    )
    assert allowed.status_code == 200, allowed.text
    assert "intruder.md" in sources(url, "public")


def test_a_scoped_admin_deletes_only_inside_its_collections(scoped):
    url, _ = scoped
    named = httpx.delete(
        f"{url}/v1/documents",
        params={"source": "plans.md", "collection": "secret"},
        headers=auth("pubadmin"),
    )
    assert named.status_code == 403, named.text
    assert "plans.md" in sources(url, "secret")
    secret_only = httpx.delete(
        f"{url}/v1/documents", params={"source": "launch.md"}, headers=auth("pubadmin")
    )
    assert secret_only.status_code == 404  # nothing it may change holds it: nothing removed
    assert "launch.md" in sources(url, "secret")
    unnamed = httpx.delete(
        f"{url}/v1/documents", params={"source": "plans.md"}, headers=auth("pubadmin")
    )
    assert unnamed.json() == {"removed": 1}
    assert "plans.md" not in sources(url, "public")
    assert "plans.md" in sources(url, "secret")
    everywhere = httpx.delete(
        f"{url}/v1/documents", params={"source": "plans.md"}, headers=auth("root")
    )
    assert everywhere.json() == {"removed": 1}


def ask(url: str, key: str, question: str) -> str:
    answered = httpx.post(
        f"{url}/v1/ask", json={"question": question, "engine": "rag"}, headers=auth(key), timeout=60
    )
    assert answered.status_code == 200, answered.text
    return answered.json()["run_id"]


def listed_runs(url: str, key: str) -> set[str]:
    page = httpx.get(f"{url}/v1/traces", params={"limit": 100}, headers=auth(key))
    assert page.status_code == 200, page.text
    return {t["id"] for t in page.json()["traces"]}


def test_an_admin_reads_the_runs_of_its_own_collections_only(scoped):
    url, _ = scoped
    secret_run = ask(url, "bob", "When is the secret tent launch?")
    public_run = ask(url, "alice", "How much does tent hire cost?")
    everywhere_run = ask(url, "root", "How much does the Nimbus tent weigh?")
    own_run = ask(url, "pubadmin", "What does the Skylark 2 weigh?")

    assert listed_runs(url, "pubadmin") >= {public_run, own_run}
    assert not listed_runs(url, "pubadmin") & {secret_run, everywhere_run}
    for hidden in (secret_run, everywhere_run):
        read = httpx.get(f"{url}/v1/traces/{hidden}", headers=auth("pubadmin"))
        assert read.status_code == 404, read.text
    assert httpx.get(f"{url}/v1/traces/{public_run}", headers=auth("pubadmin")).status_code == 200
    # a key with every collection reads every run; a reader key only its own
    assert listed_runs(url, "root") >= {secret_run, public_run, everywhere_run, own_run}
    assert listed_runs(url, "alice") & {secret_run, everywhere_run, own_run} == set()
    stale = httpx.get(f"{url}/v1/traces", params={"stale": True}, headers=auth("pubadmin"))
    assert {t["id"] for t in stale.json()["traces"]} <= {public_run, own_run}

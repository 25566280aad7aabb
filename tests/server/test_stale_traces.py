"""GET /v1/traces: the runs a key asked, each with the documents its answer cites that changed
since, and the stale mark on a stored run's JSON and HTML."""

from __future__ import annotations

import httpx

from tests.server.conftest import auth, build_kb, key_settings, serving

QUESTION = "How much does the Skylark 2 weigh?"


def test_a_run_whose_cited_document_changed_is_listed_stale_for_its_key_only(tmp_path):
    with serving(build_kb(tmp_path / "kb.sqlite"), key_settings(), tmp_path) as (url, _):
        asked = httpx.post(
            f"{url}/v1/ask", json={"question": QUESTION}, headers=auth("alice"), timeout=60
        ).json()
        listed = httpx.get(f"{url}/v1/traces", headers=auth("alice")).json()["traces"]
        assert [t["id"] for t in listed] == [asked["run_id"]]
        assert listed[0]["stale"] == []
        assert listed[0]["trace_url"] == asked["trace_url"]
        fresh = httpx.get(f"{url}/v1/traces?stale=true", headers=auth("alice")).json()
        assert fresh["traces"] == []

        edited = {"source": "skylark.md", "text": "The Skylark 2 weighs 1.9 kg packed."}
        changed = httpx.post(
            f"{url}/v1/documents",
            json={"documents": [edited], "collection": "public"},
            headers=auth("root"),
        )
        assert changed.status_code == 200, changed.text

        stale = httpx.get(f"{url}/v1/traces?stale=true", headers=auth("alice")).json()["traces"]
        assert [t["id"] for t in stale] == [asked["run_id"]]
        (source,) = stale[0]["stale"]
        assert (source["collection"], source["source"], source["change"]) == (
            "public",
            "skylark.md",
            "edited",
        )
        assert httpx.get(f"{url}/v1/traces?stale=true", headers=auth("bob")).json() == {
            "traces": []
        }  # another key's runs are not listed, stale or not
        trace = httpx.get(f"{url}{asked['trace_url']}", headers=auth("alice")).json()
        assert trace["stale"][0]["source"] == "skylark.md"
        page = httpx.get(f"{url}{asked['trace_url']}?format=html", headers=auth("alice")).text
        assert "<h2>Stale</h2>" in page


def test_the_traces_listing_is_bounded(server):
    url, _ = server
    assert httpx.get(f"{url}/v1/traces?limit=0", headers=auth("root")).status_code == 422
    assert httpx.get(f"{url}/v1/traces?limit=5000", headers=auth("root")).status_code == 422


def test_writes_through_the_api_tell_the_documents_listeners(tmp_path):
    heard: list[tuple[str, list[str]]] = []
    with serving(build_kb(tmp_path / "kb.sqlite"), key_settings(), tmp_path) as (url, service):
        service.on_documents_changed(
            lambda collection, sources: heard.append((collection, sources))
        )
        added = {"source": "stoves.md", "text": "Stoves are for hire at 5 pounds a day."}
        body = {"documents": [added], "collection": "public"}
        assert httpx.post(f"{url}/v1/documents", json=body, headers=auth("root")).is_success
        files = {"files": ("manuals/pump.md", b"# Pump\n\nPump to 4 bar.", "text/markdown")}
        uploaded = httpx.post(
            f"{url}/v1/documents/files", files=files, data={"collection": "public"},
            headers=auth("root"),
        )  # fmt: skip
        assert uploaded.is_success, uploaded.text
        gone = httpx.delete(
            f"{url}/v1/documents?source=stoves.md&collection=public", headers=auth("root")
        )
        assert gone.json()["removed"] == 1
    assert heard == [
        ("public", ["stoves.md"]),
        ("public", ["manuals/pump.md"]),
        ("public", ["stoves.md"]),
    ]

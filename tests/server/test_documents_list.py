"""``GET /v1/documents`` (issue 31, item 21): a collection's documents, a page at a time, with
the access rules of the other reads (a key sees its collections only; an admin sees all)."""

from __future__ import annotations

import httpx

from tests.server.conftest import auth


def listed(url: str, key: str, **params: object) -> httpx.Response:
    return httpx.get(f"{url}/v1/documents", params=params, headers=auth(key))


def test_an_admin_pages_through_every_collection(server):
    url, _ = server
    first = listed(url, "root", limit=2).json()
    assert first["total"] == 5
    assert first["admin"] is True
    assert [(d["collection"], d["source"]) for d in first["documents"]] == [
        ("public", "hire.md"),
        ("public", "returns.md"),
    ]
    rest = listed(url, "root", offset=2, limit=10).json()
    assert [d["source"] for d in rest["documents"]] == ["skylark.md", "launch.md", "margins.md"]
    assert rest["documents"][0]["title"] == "Skylark 2"
    past = listed(url, "root", offset=50).json()
    assert past["documents"] == []
    assert past["total"] == 5
    secret = listed(url, "root", collection="secret").json()
    assert [d["source"] for d in secret["documents"]] == ["launch.md", "margins.md"]


def test_a_key_lists_only_its_collections(server):
    url, _ = server
    page = listed(url, "alice").json()
    assert {d["collection"] for d in page["documents"]} == {"public"}
    assert page["total"] == 3
    assert page["admin"] is False
    refused = listed(url, "alice", collection="secret")
    assert refused.status_code == 403
    assert "may not read collection 'secret'" in refused.json()["detail"]
    assert httpx.get(f"{url}/v1/documents").status_code == 401


def test_bad_paging_and_unknown_collections_are_4xx(server):
    url, _ = server
    assert listed(url, "root", limit=0).status_code == 422
    assert listed(url, "root", limit=501).status_code == 422
    assert listed(url, "root", offset=-1).status_code == 422
    assert listed(url, "root", collection="").status_code == 422
    unknown = listed(url, "root", collection="pubic")
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == "no collection 'pubic'"

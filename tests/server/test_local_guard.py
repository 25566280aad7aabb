"""Keyless means this machine and this origin only: without keys the server answers a loopback
``Host`` only (421 otherwise: DNS rebinding) and takes changes only from its own origin (403:
another site's page), checked with httpx and with a real page of another origin in headless
Chromium. With keys, keys decide."""

from __future__ import annotations

import httpx
import pytest

from ragloop.config import Settings
from tests.server.conftest import auth, key_settings, serving

DOC = {"source": "planted.md", "text": "The Skylark 2 now weighs 90 kg, says the attacker."}


def add(url: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/documents",
        json={"documents": [DOC], "collection": "public"},
        headers=headers,
        timeout=30,
    )


def sources(url: str, **headers: str) -> set[str]:
    found = httpx.post(
        f"{url}/v1/search", json={"query": "Skylark attacker 90 kg", "top_k": 20}, headers=headers
    )
    assert found.status_code == 200, found.text
    return {c["source"] for c in found.json()["chunks"]}


@pytest.fixture
def keyless(kb_file, tmp_path, tmp_path_factory):
    # a knowledge base of its own: these tests try to write to it
    from tests.server.conftest import build_kb

    kb = build_kb(tmp_path_factory.mktemp("guarded") / "kb.sqlite")
    with serving(kb, Settings(), tmp_path) as (url, service):
        yield url, service


def test_a_rebound_name_is_refused_for_reads_and_writes(keyless):
    url, _ = keyless
    rebound = {"Host": "rebind.test"}
    read = httpx.get(f"{url}/v1/collections", headers=rebound)
    assert read.status_code == 421
    assert "rebind.test" in read.json()["detail"]
    gone = httpx.delete(f"{url}/v1/documents", params={"source": "hire.md"}, headers=rebound)
    assert gone.status_code == 421
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    mcp = httpx.post(f"{url}/mcp", json=ping, headers=rebound)
    assert mcp.status_code == 421
    assert "hire.md" in sources(url)  # nothing was deleted
    port = url.rsplit(":", 1)[1]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "127.0.0.1"):
        assert httpx.get(f"{url}/v1/collections", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.test"},
        {"Origin": "null"},
        {"Referer": "http://evil.test/page.html"},
        {"Origin": "http://127.0.0.1:1"},  # another port is another origin
        {"Origin": "http://localhost.evil.test"},
    ],
)
def test_a_change_from_another_origin_is_refused(keyless, headers):
    url, _ = keyless
    refused = add(url, **headers)
    assert refused.status_code == 403, refused.text
    assert "own page" in refused.json()["detail"]
    upload = httpx.post(
        f"{url}/v1/documents/files",
        files={"files": ("planted.md", DOC["text"].encode(), "text/markdown")},
        data={"collection": "public"},
        headers=headers,
    )
    assert upload.status_code == 403
    gone = httpx.delete(f"{url}/v1/documents", params={"source": "hire.md"}, headers=headers)
    assert gone.status_code == 403
    assert "planted.md" not in sources(url)
    assert "hire.md" in sources(url)
    # reads are not changes: the page of another origin cannot read them anyway (no CORS)
    assert httpx.get(f"{url}/v1/collections", headers=headers).status_code == 200


def test_the_own_origin_and_programs_without_origin_may_change(keyless):
    url, _ = keyless
    assert add(url, Origin=url).status_code == 200
    assert add(url, Referer=f"{url}/").status_code == 200
    assert add(url).status_code == 200  # curl, httpx, scripts: no Origin, no Referer
    assert "planted.md" in sources(url)


def test_with_keys_the_keys_decide(kb_file, tmp_path):
    with serving(kb_file, key_settings(), tmp_path) as (url, _):
        foreign = {"Origin": "http://evil.test", "Host": "api.example.test"}
        assert httpx.get(f"{url}/v1/collections", headers=foreign).status_code == 401
        listed = httpx.get(f"{url}/v1/collections", headers={**foreign, **auth("alice")})
        assert listed.status_code == 200

"""A fleet: one PostgreSQL and two `ragloop serve` processes, each with a home and a data
folder of its own (no file they could share), asked through one and read through the other:
the run's trace, the collections and the documents. And docs/docker-compose.yml, which runs
the same fleet in Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from ragloop.config import hash_key
from tests.server.test_serve_command import serve_process

DOCS = Path(__file__).resolve().parents[2] / "docs"
KEYS = {"app": "rl-fleet-app-key", "ops": "rl-fleet-ops-key"}
CORPUS = {
    "skylark.md": "# Skylark 2\n\nThe Skylark 2 is a two-person tent. It weighs 2.1 kg packed.\n",
    "returns.md": "# Returns\n\nRefunds are issued within 30 days of the return arriving.\n",
    "stoves.md": "# Ember stove\n\nThe Ember stove boils a litre of water in four minutes.\n",
}


def server_home(root: Path, dsn: str) -> dict[str, str]:
    """A server's own home, data folder and config (the same settings, in its own file)."""
    root.mkdir()
    config = root / "ragloop.toml"
    config.write_text(
        f"""
[kb]
location = "{dsn}"
embedder = "hash"

[server.keys.app]
hash = "{hash_key(KEYS["app"])}"
collections = ["handbook"]

[server.keys.ops]
hash = "{hash_key(KEYS["ops"])}"
admin = true
""",
        encoding="utf-8",
    )
    return {
        "HOME": str(root),
        "XDG_DATA_HOME": str(root / "data"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "RAGLOOP_CONFIG": str(config),
    }


def ragloop(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAGLOOP_")}
    return subprocess.run(
        [sys.executable, "-m", "ragloop", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


def test_a_run_asked_through_one_server_is_read_through_the_other(postgres_database, tmp_path):
    database = postgres_database
    homes = {name: server_home(tmp_path / name, database) for name in ("a", "b")}
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in CORPUS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    ingested = ragloop(
        "ingest", str(corpus), "--kb", database, "--collection", "handbook", "--embedder", "hash",
        env=homes["a"],
    )  # fmt: skip
    assert ingested.returncode == 0, ingested.stderr
    with (
        serve_process(env=homes["a"]) as (first, _),
        serve_process("--workers", "2", env=homes["b"]) as (second, _),
    ):
        health = httpx.get(f"{second}/healthz").json()
        assert health["knowledge_base"] == "postgresql"
        assert health["workers"] == 2
        assert health["shared"] == {
            "traces": "postgresql",
            "concurrency": "postgresql",
            "query_vectors": "postgresql",
        }
        asked = httpx.post(
            f"{first}/v1/ask",
            json={"question": "How much does the Skylark 2 weigh?"},
            headers=auth("app"),
            timeout=120,
        )
        assert asked.status_code == 200, asked.text
        answer = asked.json()
        assert "2.1 kg" in answer["answer"]
        trace = httpx.get(f"{second}{answer['trace_url']}", headers=auth("app"), timeout=30)
        assert trace.status_code == 200, trace.text  # answered by A, read through B
        stored = trace.json()
        assert (stored["id"], stored["question"]) == (answer["run_id"], answer["question"])
        assert stored["meta"]["key"] == "app"
        page = httpx.get(f"{second}{answer['trace_url']}?format=html", headers=auth("app"))
        assert "Skylark" in page.text
        collections = httpx.get(f"{second}/v1/collections", headers=auth("app")).json()
        assert [(c["name"], c["documents"]) for c in collections] == [("handbook", 3)]
        listed = httpx.get(f"{second}/v1/documents", headers=auth("app")).json()
        assert sorted(d["source"] for d in listed["documents"]) == sorted(CORPUS)
        added = httpx.post(  # written through B, found through A
            f"{second}/v1/documents",
            json={
                "documents": [{"source": "pegs.md", "text": "Titanium pegs weigh 6 grams."}],
                "collection": "handbook",
            },
            headers=auth("ops"),
            timeout=60,
        )
        assert added.json()["added"] == 1, added.text
        found = httpx.post(
            f"{first}/v1/search", json={"query": "titanium pegs"}, headers=auth("app")
        ).json()["chunks"]
        assert found[0]["source"] == "pegs.md"
    # the command line reads the same traces, from either home
    listed_by_cli = ragloop("traces", "list", "--kb", database, "--json", env=homes["b"])
    assert listed_by_cli.returncode == 0, listed_by_cli.stderr
    assert [t["id"] for t in json.loads(listed_by_cli.stdout)] == [answer["run_id"]]
    shown = ragloop("traces", "show", answer["run_id"][:10], "--kb", database, env=homes["b"])
    assert shown.returncode == 0, shown.stderr
    assert "Skylark" in shown.stdout
    for home in homes.values():  # no trace file anywhere: nothing a server could share
        assert not list(Path(home["HOME"]).rglob("*.sqlite")), home


def test_the_compose_file_runs_two_servers_over_one_database():
    compose = yaml.safe_load((DOCS / "docker-compose.yml").read_text(encoding="utf-8"))
    services = compose["services"]
    databases = [name for name, s in services.items() if "pgvector" in s.get("image", "")]
    servers = {
        name: s for name, s in services.items() if "ragloop serve" in " ".join(s.get("command", []))
    }
    assert len(databases) == 1
    assert len(servers) == 2
    kbs = {s["environment"]["RAGLOOP_KB"] for s in servers.values()}
    assert len(kbs) == 1  # one knowledge base
    assert kbs.pop().split("@", 1)[1].startswith(f"{databases[0]}:")  # in that database
    ports = [p for s in servers.values() for p in s["ports"]]
    assert len(set(ports)) == 2  # each server on a port of its own
    assert all(p.startswith("127.0.0.1:") for p in ports)
    for server in servers.values():  # nothing shared but the database
        assert not any(k.endswith("TRACES") for k in server["environment"])
        assert all(v.endswith(":ro") for v in server.get("volumes", []))  # the source, read-only
        assert server["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert list(compose.get("volumes", {})) == ["ragloop-pgdata"]  # the database's only

"""A real server for the server tests: uvicorn on 127.0.0.1 in a thread, over a small knowledge
base with two collections, and API keys limited to each."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server tests need ragloop[server]")
pytest.importorskip("uvicorn", reason="the server tests need ragloop[server]")

from ragloop import Document, KnowledgeBase
from ragloop.components.calibration import IDENTITY
from ragloop.config import Settings, hash_key
from ragloop.server.app import create_app
from ragloop.server.running import BackgroundServer
from ragloop.server.service import Service

KEYS = {
    "alice": "rl-alice-key",
    "bob": "rl-bob-key",
    "root": "rl-root-key",
    "one": "rl-one-key",
    "pubadmin": "rl-pubadmin-key",
}
PUBLIC = [
    Document(
        source="hire.md",
        title="Gear library",
        text="A tent costs 12 pounds a night to hire, or 30 pounds for a weekend.",
    ),
    Document(
        source="skylark.md",
        title="Skylark 2",
        text="The Skylark 2 is a two-person tent. The Skylark 2 weighs 2.1 kg packed.",
    ),
    Document(
        source="returns.md",
        title="Returns",
        text="Refunds are issued within 30 days of the return reaching the warehouse.",
    ),
]
SECRET = [
    Document(
        source="launch.md",
        title="Launch plan",
        text="The secret tent launch is on 4 May. The Nimbus tent weighs 900 grams.",
    ),
    Document(
        source="margins.md",
        title="Margins",
        text="Tent hire makes a margin of 70 percent; the weekend price is the most profitable.",
    ),
]


def build_kb(path: Path) -> Path:
    with KnowledgeBase(path, embedder="hash") as kb:
        kb.add_documents(PUBLIC, collection="public")
        kb.add_documents(SECRET, collection="secret")
    return path


@pytest.fixture(scope="session")
def kb_file(tmp_path_factory) -> Path:
    return build_kb(tmp_path_factory.mktemp("served") / "kb.sqlite")


def key_settings(**server: object) -> Settings:
    keys = {
        "alice": {"hash": hash_key(KEYS["alice"]), "collections": ["public"]},
        "bob": {"hash": hash_key(KEYS["bob"]), "collections": ["secret"]},
        "root": {"hash": hash_key(KEYS["root"]), "admin": True},
        "one": {"hash": hash_key(KEYS["one"]), "max_concurrency": 1},
        "pubadmin": {"hash": hash_key(KEYS["pubadmin"]), "collections": ["public"], "admin": True},
    }
    return Settings.model_validate({"server": {"keys": keys, **server}})


@contextlib.contextmanager
def serving(kb_path: Path, settings: Settings, tmp_path: Path) -> Iterator[tuple[str, Service]]:
    """The app over a knowledge base file, served on loopback. Unless the settings say
    otherwise its engines read the judge's score as the chance (the identity calibration) and
    stand by an answer at 0.5: these knowledge bases are a few sentences embedded by the hash
    embedder, not what the offline engines' shipped calibration was fitted on."""
    kb = KnowledgeBase(kb_path, create=False)
    engine = settings.engine
    if engine.target_precision is None and engine.confidence_threshold is None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        identity = tmp_path / "identity-calibration.json"
        identity.write_text(IDENTITY.model_dump_json(), encoding="utf-8")
        engine = engine.model_copy(update={"target_precision": 0.5, "calibration": str(identity)})
    settings = settings.model_copy(
        update={
            "server": settings.server.model_copy(update={"traces": str(tmp_path / "t.sqlite")}),
            "engine": engine,
        }
    )
    service = Service(kb, settings)
    try:
        with BackgroundServer(create_app(service)) as running:
            yield running.url, service
    finally:
        service.close()
        kb.close()


@pytest.fixture
def server(kb_file, tmp_path) -> Iterator[tuple[str, Service]]:
    """The server with keys: alice reads public, bob secret, root is admin, one runs one at a
    time, pubadmin is an admin of public only."""
    with serving(kb_file, key_settings(), tmp_path) as running:
        yield running


def engine_key(service: Service, kind: str) -> tuple[object, ...]:
    """The key the service keeps its engine of ``kind`` over every collection under (built
    once here), where a test puts an engine of its own."""
    service.engine(kind, None)
    return next(key for key in reversed(service._engines) if key[:2] == (kind, None))


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}

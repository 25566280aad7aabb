"""The demo: the staff handbook of Fellside Outfitters, an outdoor-gear shop we made up.

Thirty-four short documents (products, policies, care guides, staff pages) ship with ragloop in
``ragloop/demo/corpus``; :func:`demo_knowledge_base` builds them into a knowledge base in the
user cache folder on first use (and reuses it afterwards), and :data:`DEMO_QUESTIONS` are the
questions that show what the loop adds: one answered first time, one that needs the shop's own
vocabulary, one in two parts, and one that has to hop from one document to another.

``ragloop ask --demo`` and ``ragloop search --demo`` use them; ``make demo`` asks them all.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import platformdirs

from ragloop.kb.embedding.embedders import default_embedder
from ragloop.kb.knowledge_base import Document, KnowledgeBase

CACHE_ENV = "RAGLOOP_DEMO_DIR"


@dataclass(frozen=True)
class DemoQuestion:
    """A demo question, the facts a correct answer states, and what it shows."""

    text: str
    kind: str
    facts: tuple[str, ...]
    shows: str


DEMO_QUESTIONS: tuple[DemoQuestion, ...] = (
    DemoQuestion(
        text="How much does the Skylark 2 weigh?",
        kind="first time",
        facts=("1.6 kg",),
        shows="the first retrieval has the answer: the evaluator is satisfied and the loop "
        "stops after one iteration",
    ),
    DemoQuestion(
        text="Do you rent out stoves?",
        kind="vocabulary shift",
        facts=("hired",),
        shows="the shop never says 'rent': its documents say 'hire', and the offline components "
        "find that word in the knowledge base",
    ),
    DemoQuestion(
        text="How long do I have to return an item, and how long does standard delivery take?",
        kind="multi-part",
        facts=("60 days", "3 to 5 working days"),
        shows="two questions in one: the evaluator checks that each part is answered, here from "
        "two documents found by the first search",
    ),
    DemoQuestion(
        text="What warranty does the tent Priya Shah takes wild camping come with?",
        kind="multi-hop",
        facts=("Skylark 2", "3 years"),
        shows="Priya's page names the tent, the tent's page names the guarantee, and only the "
        "guarantee says how long: the loop follows the names from one document to the next",
    ),
)


def corpus_files() -> list[tuple[str, Traversable]]:
    """The corpus files as (relative source, resource), sorted."""
    root = files("ragloop.demo").joinpath("corpus")
    out: list[tuple[str, Traversable]] = []

    def walk(folder: Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith(".md"):
                out.append((f"{prefix}{entry.name}", entry))

    walk(root, "")
    return sorted(out, key=lambda item: item[0])


def demo_documents() -> list[Document]:
    """The corpus as documents (markdown; each titled by its first heading)."""
    documents = []
    for source, resource in corpus_files():
        text = resource.read_text(encoding="utf-8")
        first = text.lstrip().splitlines()[0] if text.strip() else ""
        title = first.lstrip("#").strip() if first.startswith("# ") else None
        documents.append(Document(text=text, source=source, title=title, format="markdown"))
    return documents


def _fingerprint(documents: list[Document]) -> str:
    digest = hashlib.sha256()
    for document in documents:
        digest.update(f"{document.source}\0{document.text}\0".encode())
    return digest.hexdigest()[:12]


def demo_kb_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the demo knowledge base lives: ``cache_dir``, else ``$RAGLOOP_DEMO_DIR``, else the
    user cache folder; the name holds the corpus fingerprint and the embedder, so an edited
    corpus or a newly installed embedder gets a fresh knowledge base."""
    folder = Path(
        cache_dir or os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("ragloop")
    ).expanduser()
    embedder, _ = default_embedder()
    model = embedder.model_id if embedder is not None else "bm25"
    return folder / f"demo-{_fingerprint(demo_documents())}-{model}.sqlite"


def demo_knowledge_base(cache_dir: str | os.PathLike[str] | None = None) -> KnowledgeBase:
    """The demo knowledge base, built on first use (a few seconds) and cached."""
    path = demo_kb_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    kb = KnowledgeBase(path)
    kb.add_documents(demo_documents())  # unchanged documents cost nothing
    return kb

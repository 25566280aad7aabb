"""The title/heading link graph: which chunks mention which other documents' titles or headings.

Multi-hop questions cross from one document to another through a name ("the director of
*Titanic*"); this graph records those crossings at ingest time so loops can follow them (seed
004's graph route, Arcana's graph data, the entity-bridge refiner).

A chunk links to a target chunk when its text contains the target's document title or its last
heading, and the two belong to different documents. Multi-word names match case-insensitively;
a one-word name must appear with its own capitalisation ("Paris", not "paris"), and generic
headings ("Overview", "Introduction", ...) never link. Both directions are computed when a
document is written: its chunks against every known name, and every earlier chunk against its
new names, so the graph does not depend on ingestion order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ragloop.components.text import STOPWORDS
from ragloop.retrieval.store import Link, Store

GENERIC_NAMES = frozenset(
    """overview introduction summary conclusion conclusions references contents faq notes
    examples example background details usage installation abstract appendix index home
    about contact help glossary table history description features requirements setup""".split()
)
MAX_NAME_WORDS = 8
MAX_REVERSE_MATCHES = 200  # a name found in more chunks than this is too common to be a link

_WORD = re.compile(r"[^\W_]+(?:['’.\-][^\W_]+)*")


def normalise_name(name: str) -> str:
    return " ".join(_WORD.findall(name.lower()))


def is_linkable(name: str) -> bool:
    words = _WORD.findall(name)
    if not words or len(words) > MAX_NAME_WORDS:
        return False
    lowered = [w.lower() for w in words]
    if all(w in STOPWORDS or w in GENERIC_NAMES for w in lowered):
        return False
    if len(words) == 1:
        word = words[0]
        return len(word) >= 3 and (word[0].isupper() or word[0].isdigit())
    return len("".join(words)) >= 4


@dataclass
class NameIndex:
    """Known names by their first word, for fast scanning of chunk text."""

    by_first: dict[str, list[tuple[tuple[str, ...], str, str, str]]] = field(default_factory=dict)

    @classmethod
    def from_targets(cls, targets: Iterable[tuple[str, str, str]]) -> NameIndex:
        index = cls()
        for name, chunk_id, doc_key in targets:
            index.add(name, chunk_id, doc_key)
        return index

    def add(self, name: str, chunk_id: str, doc_key: str) -> None:
        if not is_linkable(name):
            return
        words = tuple(normalise_name(name).split())
        entries = self.by_first.setdefault(words[0], [])
        if all(entry[0] != words for entry in entries):
            entries.append((words, name, chunk_id, doc_key))
            entries.sort(key=lambda entry: -len(entry[0]))

    def mentions(self, text: str, doc_key: str) -> list[tuple[str, str]]:
        """(target chunk id, name) for each known name the text mentions, other documents only."""
        originals = _WORD.findall(text)
        words = [w.lower() for w in originals]
        found: dict[str, str] = {}
        for i, word in enumerate(words):
            for name_words, name, chunk_id, target_doc in self.by_first.get(word, ()):
                if target_doc == doc_key or chunk_id in found:
                    continue
                if tuple(words[i : i + len(name_words)]) != name_words:
                    continue
                if len(name_words) == 1 and originals[i] != name:
                    continue
                found[chunk_id] = name
        return list(found.items())


def reverse_links(
    store: Store, names: Iterable[tuple[str, str, str]], exclude_chunks: set[str]
) -> list[Link]:
    """Links from chunks already stored to new names ``(name, target chunk id, doc key)``."""
    links: list[Link] = []
    for name, target_id, doc_key in names:
        if not is_linkable(name):
            continue
        matches = store.chunks_with_phrase(name, MAX_REVERSE_MATCHES + 1)
        if len(matches) > MAX_REVERSE_MATCHES:
            continue
        single = len(_WORD.findall(name)) == 1
        for chunk_id, chunk_doc, content in matches:
            if chunk_doc == doc_key or chunk_id in exclude_chunks:
                continue
            if single and name not in _WORD.findall(content):
                continue
            links.append(Link(chunk_id, target_id, name))
    return links

"""The title/heading link graph: which chunks mention which other documents' titles or headings.

Multi-hop questions cross from one document to another through a name ("the director of
*Titanic*"); this graph records those crossings at ingest time so loops can follow them (seed
004's graph route, Arcana's graph data, the entity-bridge refiner).

A chunk links to a target chunk when its text contains the target's document title or its last
heading, and the two belong to different documents. Multi-word names match case-insensitively;
a one-word name must appear with its own capitalisation ("Paris", not "paris"), and generic
headings ("Overview", "Introduction", ...) never link. An identifier is one word
("RETURN_VALUE", "sys.exc_info"): prose that uses its parts ("the return value") does not
mention it. A document's target for a name is its first chunk that bears the name (the title
names the first chunk), and a chunk mentioning a name links to that target in every other
document bearing it; when several of a target's names occur in one chunk, the link records
the longest. Both directions are computed when a document is written: its chunks against every
known name, and every stored chunk against its names, with the same matching, so the graph does
not depend on ingestion order: updating documents gives the same links as building the
knowledge base again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ragloop.core.text import STOPWORDS
from ragloop.kb.stores.base import Link, PhraseBatches, Store

GENERIC_NAMES = frozenset(
    """overview introduction summary conclusion conclusions references contents faq notes
    examples example background details usage installation abstract appendix index home
    about contact help glossary table history description features requirements setup""".split()
)
MAX_NAME_WORDS = 8
# chunks_with_phrase's limit when looking for a new name in stored chunks: every one of them
# (a cap would make the links depend on the order documents were ingested in)
ALL_MATCHES = 2**62

# A word: letters and digits, joined by an apostrophe, a dot, a hyphen or an underscore, so an
# identifier is one word ("first_line", "sys.exc_info") and is not mentioned by prose that uses
# its parts ("the first line").
_WORD = re.compile(r"[^\W_]+(?:['’.\-_][^\W_]+)*")


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


def name_key(name: str) -> tuple[str, ...]:
    """The words a name is matched by."""
    return tuple(normalise_name(name).split())


def _mentioned(
    originals: list[str], words: list[str], at: int, key: tuple[str, ...], name: str
) -> bool:
    """Whether the name (its ``key`` words) occurs at word ``at`` of a text."""
    if tuple(words[at : at + len(key)]) != key:
        return False
    return len(key) > 1 or originals[at] == name


def mentions_name(text: str, name: str) -> bool:
    """Whether ``text`` mentions ``name`` (the matching :meth:`NameIndex.mentions` uses)."""
    key = name_key(name)
    if not key:
        return False
    originals = _WORD.findall(text)
    words = [w.lower() for w in originals]
    return any(
        _mentioned(originals, words, i, key, name) for i, w in enumerate(words) if w == key[0]
    )


def better_mention(current: str | None, candidate: str) -> bool:
    """Of two names of one target a chunk mentions, the one its link records: the longest."""
    if current is None:
        return True
    return (len(name_key(candidate)), len(candidate), current) > (
        len(name_key(current)),
        len(current),
        candidate,
    )


def document_names(
    title: str, chunks: Iterable[tuple[str, Sequence[str]]]
) -> list[tuple[str, str]]:
    """(name, target chunk id) of a document: its title names its first chunk, each heading the
    first chunk under it; one target per name. ``chunks`` are (chunk id, heading path) in
    order."""
    names: dict[tuple[str, ...], tuple[str, str]] = {}
    for position, (chunk_id, heading_path) in enumerate(chunks):
        candidates = ([title] if position == 0 else []) + list(heading_path[-1:])
        for name in candidates:
            if name and is_linkable(name):
                names.setdefault(name_key(name), (name, chunk_id))
    return list(names.values())


@dataclass
class NameIndex:
    """Known names by their words, for scanning chunk text in time linear in its length: for
    each name, its target in each document that bears it."""

    # name words -> document key -> (name as written, target chunk id)
    by_words: dict[tuple[str, ...], dict[str, tuple[str, str]]] = field(default_factory=dict)
    by_document: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    # first word -> how many words the names starting with it have (and how many such names)
    lengths: dict[str, dict[int, int]] = field(default_factory=dict)

    @classmethod
    def from_targets(cls, targets: Iterable[tuple[str, str, str]]) -> NameIndex:
        """From (name, chunk id, document key) in each document's chunk order (a store's
        ``link_targets()``): a document's first chunk bearing a name is its target."""
        index = cls()
        for name, chunk_id, doc_key in targets:
            index.add(name, chunk_id, doc_key)
        return index

    def add(self, name: str, chunk_id: str, doc_key: str) -> None:
        """Record a target, unless the document already has one for this name."""
        if not is_linkable(name):
            return
        words = name_key(name)
        bearers = self.by_words.setdefault(words, {})
        if doc_key not in bearers:
            bearers[doc_key] = (name, chunk_id)
            self.by_document.setdefault(doc_key, []).append(words)
            counts = self.lengths.setdefault(words[0], {})
            counts[len(words)] = counts.get(len(words), 0) + 1

    def discard(self, doc_key: str) -> None:
        """Forget a document's names (it is being replaced)."""
        for words in self.by_document.pop(doc_key, []):
            bearers = self.by_words[words]
            del bearers[doc_key]
            if not bearers:
                del self.by_words[words]
            counts = self.lengths[words[0]]
            counts[len(words)] -= 1
            if not counts[len(words)]:
                del counts[len(words)]

    def mentions(self, text: str, doc_key: str) -> list[tuple[str, str]]:
        """(target chunk id, name) for each known name the text mentions, other documents only;
        one name per target (:func:`better_mention`)."""
        originals = _WORD.findall(text)
        words = [w.lower() for w in originals]
        found: dict[str, str] = {}
        for i, word in enumerate(words):
            for length in self.lengths.get(word, ()):
                key = tuple(words[i : i + length])
                for target_doc, (name, chunk_id) in self.by_words.get(key, {}).items():
                    if target_doc == doc_key or not _mentioned(originals, words, i, key, name):
                        continue
                    if better_mention(found.get(chunk_id), name):
                        found[chunk_id] = name
        return list(found.items())


def reverse_links(store: Store, names: Iterable[tuple[str, str, str]]) -> list[Link]:
    """Links from chunks already stored to new names ``(name, target chunk id, doc key)``:
    the store's phrase search finds the candidates (every name in one query when the store
    can: :class:`~ragloop.kb.stores.base.PhraseBatches`), :func:`mentions_name` decides, as
    for the new chunks' own links."""
    linkable = [entry for entry in names if is_linkable(entry[0])]
    if isinstance(store, PhraseBatches):
        found = store.chunks_with_phrases(
            list(dict.fromkeys(n for n, _, _ in linkable)), ALL_MATCHES
        )
    else:
        found = {n: store.chunks_with_phrase(n, ALL_MATCHES) for n, _, _ in linkable}
    links: list[Link] = []
    for name, target_id, doc_key in linkable:
        for chunk_id, chunk_doc, content in found.get(name, ()):
            if chunk_doc != doc_key and mentions_name(content, name):
                links.append(Link(chunk_id, target_id, name))
    return links


def canonical(links: Iterable[Link]) -> list[Link]:
    """One link per (chunk, target), recording the better mention (:func:`better_mention`)."""
    best: dict[tuple[str, str], Link] = {}
    for link in links:
        key = (link.chunk_id, link.target_id)
        held = best.get(key)
        if better_mention(held.mention if held else None, link.mention):
            best[key] = link
    return list(best.values())

"""The six reformulation strategies without an LLM.

Each strategy is a function of the question and the evidence earlier iterations retrieved, and,
when the reformulator was given one, of the
:class:`~ragloop.components.heuristics.corpus.Corpus` (the knowledge base itself: a wider search,
its embedder and its link graph). What each one does:

- **expand**: the question plus related terms: pseudo-relevance feedback, i.e. the terms that
  weigh most in the best chunks (with a corpus: of a wider retrieval, re-ranked by embedding
  similarity to the question) and are not in the question; with neither, the singular/plural
  variants of the question's terms.
- **narrow**: the question's content terms plus the most distinctive terms of the best chunk
  (frequent in it, rare in the other chunks): a more specific query.
- **decompose**: sub-queries: the question split at clause boundaries ("?", ";", "and what
  ..."); else one sub-query per named entity, each with the rest of the question's terms; else
  a split at "and" between two content phrases; plus a *bridge* sub-query built from a name
  the best chunks mention and the question does not (with a corpus, first the documents they
  name in the link graph): the second hop of a multi-hop question, asked with the question's
  terms the evidence does not cover yet.
- **step_back**: a broader query: the question's content terms without its specifics (numbers,
  quoted titles, named entities), or, when it has none, without its trailing qualifiers.
- **hyde**: an answer-shaped sentence ("X was directed by", "X is ...") built from the question's
  form, with the strongest feedback terms, because documents are written as answers.
- **perspective_shift**: the question re-said in the documents' vocabulary: with a corpus, each
  question word the documents never use is replaced by its nearest corpus words ("rent" ->
  "hire"); otherwise the words that sit next to the question's terms in the retrieved sentences.

:func:`rewrite` applies a strategy and guarantees that at least one returned query differs from
every query tried so far; when the strategy's own candidates are all spent it falls back to
further feedback terms, then to facet words ("overview", "definition", ...).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ragloop.components.heuristics.corpus import (
    TOPIC_SIMILARITY,
    Corpus,
    chunk_text,
    feedback_weights,
    ranked_terms,
    useful_term,
)
from ragloop.components.heuristics.questions import CLAUSE_SPLIT, profile
from ragloop.core.records import Chunk
from ragloop.core.records.rag import LoopIteration, ReformulationStrategy
from ragloop.core.text import (
    QUESTION_WORDS,
    content_terms,
    entity_phrases,
    is_number,
    normalize_query,
    stem,
    tokenize,
)

FACETS = ("overview", "definition", "details", "examples", "history", "explanation", "facts")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_QUOTED = re.compile(r"'([^']{2,80})'")


@dataclass
class Evidence:
    """The chunks earlier iterations retrieved, best iteration first, without repeats.

    Term rankings break ties by length, longest first: with no corpus statistics at hand, a
    longer word is the better guess at a rarer, more specific one.
    """

    chunks: list[Chunk] = field(default_factory=list)
    corpus: Corpus | None = None
    hints: list[str] = field(default_factory=list)  # what the last evaluation quoted

    @classmethod
    def from_history(cls, history: list[LoopIteration], corpus: Corpus | None = None) -> Evidence:
        ranked = sorted(history, key=lambda it: -it.evaluation.score)  # stable: earliest on ties
        seen: set[str] = set()
        chunks: list[Chunk] = []
        for it in ranked:
            for chunk in it.chunks:
                if chunk.id not in seen:
                    seen.add(chunk.id)
                    chunks.append(chunk)
        last = history[-1].evaluation if history else None
        hints = _QUOTED.findall(last.reason) if last and not last.parse_failed else []
        return cls(chunks, corpus, hints)

    @property
    def best(self) -> Chunk | None:
        return self.chunks[0] if self.chunks else None

    def closest(self, query: str, among: int = 5) -> Chunk | None:
        """Of the best ``among`` chunks, the one closest to the question in embedding space
        (the best one without an embedder): the chunk most likely on its topic."""
        top = self.chunks[:among]
        if self.corpus is None or self.corpus.embedder is None or len(top) < 2:
            return self.best
        similarity = self.corpus.similarity(query, [chunk_text(c)[:1000] for c in top])
        return top[int(similarity.argmax())] if similarity is not None else self.best

    def _document_frequency(self) -> Counter[str]:
        df: Counter[str] = Counter()
        for chunk in self.chunks:
            df.update(set(tokenize(chunk.content)))
        return df

    def on_topic(self, query: str, terms: list[str]) -> list[str]:
        """The ``terms`` whose embedding is at least ``TOPIC_SIMILARITY`` from the question's
        (all of them without an embedder): words taken from the evidence must not pull the
        query away from the question ("lru_cache maxsize" must not gain "verbose optparse")."""
        if self.corpus is None or self.corpus.embedder is None or not terms:
            return terms
        similarity = self.corpus.similarity(query, terms)
        if similarity is None:
            return terms
        return [t for t, s in zip(terms, similarity, strict=True) if s >= TOPIC_SIMILARITY]

    def feedback_terms(
        self, query: str, exclude: Iterable[str], limit: int, top_n: int = 3
    ) -> list[str]:
        """Pseudo-relevance feedback over the best ``top_n`` chunks (:func:`feedback_weights`),
        on the question's topic."""
        ranked = ranked_terms(feedback_weights(self.chunks[:top_n], exclude))
        return self.on_topic(query, ranked[: limit * 3])[:limit]

    def distinctive_terms(
        self, query: str, chunk: Chunk, exclude: Iterable[str], limit: int
    ) -> list[str]:
        """Terms frequent in ``chunk`` and rare across the other retrieved chunks (tf-idf), on
        the question's topic."""
        excluded = set(exclude)
        df = self._document_frequency()
        n = max(len(self.chunks), 1)
        tf = Counter(t for t in tokenize(chunk.content) if _useful(t, excluded))
        score = {t: c * math.log((n + 1) / df.get(t, 1)) + c * 1e-3 for t, c in tf.items()}
        ranked = sorted(score, key=lambda t: (-score[t], -len(t), t))
        return self.on_topic(query, ranked[: limit * 3])[:limit]

    def bridge_entities(self, question: str, limit: int) -> list[str]:
        """Names the best chunks mention that the question does not: candidate second hops.
        With a corpus, the documents they name in the link graph come first."""
        asked = {normalize_query(e) for e in entity_phrases(question)}
        asked_terms = set(tokenize(question))
        found: list[str] = []
        linked = self.corpus.bridges(self.chunks[:3], limit=limit) if self.corpus else []
        # a name the evaluator pointed at ("the answer points to 'X'") is the surest next hop
        named = {normalize_query(e) for c in self.chunks for e in entity_phrases(c.content)}
        named |= {normalize_query(n) for n in linked}
        linked = [h for h in self.hints if normalize_query(h) in named] + linked
        for chunk in self.chunks[:3]:
            for phrase in [*linked, *entity_phrases(chunk.content)]:
                key = normalize_query(phrase)
                if key in asked or set(tokenize(phrase)) <= asked_terms or phrase in found:
                    continue
                found.append(phrase)
        return found[:limit]

    def neighbour_terms(self, query: str, terms: list[str], limit: int) -> list[str]:
        """Words next to the question's terms in retrieved sentences (the documents' wording)."""
        wanted = set(terms)
        counts: Counter[str] = Counter()
        for chunk in self.chunks[:5]:
            for sentence in _SENTENCE_END.split(chunk.content):
                tokens = tokenize(sentence)
                hits = [i for i, t in enumerate(tokens) if t in wanted or _shares_stem(t, wanted)]
                for i in hits:
                    for t in tokens[max(0, i - 3) : i + 4]:
                        if _useful(t, wanted):
                            counts[t] += 1
        ranked = sorted(counts, key=lambda t: (-counts[t], -len(t), t))
        return self.on_topic(query, ranked[: limit * 3])[:limit]

    def missing_terms(self, terms: list[str]) -> list[str]:
        """The terms no retrieved chunk (nor its title or headings) contains."""
        present = {stem(t) for c in self.chunks for t in tokenize(chunk_text(c))}
        return [t for t in terms if stem(t) not in present]


def _useful(token: str, excluded: set[str]) -> bool:
    return token not in excluded and useful_term(token)


def _shares_stem(token: str, terms: set[str]) -> bool:
    return len(token) > 4 and any(len(t) > 4 and t[:5] == token[:5] for t in terms)


def _inflections(terms: list[str]) -> list[str]:
    out: list[str] = []
    for term in terms:
        if is_number(term) or len(term) < 4:
            continue
        if term.endswith("ies"):
            out.append(term[:-3] + "y")
        elif term.endswith("s") and not term.endswith("ss"):
            out.append(term[:-1])
        elif term.endswith("y") and term[-2:-1] not in "aeiou":
            out.append(term[:-1] + "ies")
        else:
            out.append(term + "s")
    return out


def _strip_question(query: str) -> str:
    return query.strip().rstrip("?!. ")


# -- the six strategies ------------------------------------------------------------------------


def expand(query: str, ev: Evidence) -> list[list[str]]:
    terms = content_terms(query)
    related = ev.corpus.related_terms(query, terms, limit=4) if ev.corpus else []
    extra = related or ev.feedback_terms(query, terms, limit=4) or _inflections(terms)
    base = _strip_question(query)
    return [[f"{base} {' '.join(extra[:k])}"] for k in (3, 4, 2, 1) if extra[:k]]


def narrow(query: str, ev: Evidence) -> list[list[str]]:
    terms = content_terms(query)
    candidates: list[list[str]] = []
    closest = ev.closest(query)
    if closest is not None:
        specific = ev.distinctive_terms(query, closest, terms, limit=3)
        if specific:
            candidates.append([" ".join(terms + specific)])
    specifics = [e for e in entity_phrases(query)] + [t for t in terms if is_number(t)]
    keywords = " ".join(terms)
    if specifics:
        candidates.append([f"{' '.join(specifics)} {keywords}"])
    candidates.append([keywords])
    return candidates


_AND = re.compile(r"\s+(?:and|&)\s+", re.IGNORECASE)


def _entity_subqueries(query: str) -> list[str]:
    entities = entity_phrases(query)
    if len(entities) < 2:
        return []
    entity_terms = {t for e in entities for t in tokenize(e)}
    rest = [t for t in content_terms(query) if t not in entity_terms]
    return [" ".join([e, *rest]) for e in entities]


def _and_subqueries(query: str) -> list[str]:
    parts = _AND.split(_strip_question(query))
    if len(parts) != 2 or not all(content_terms(p) for p in parts):
        return []
    left, right = parts
    # "Research and Development budget": capitalised words on both sides name one thing
    left_word, right_word = left.split()[-1], right.split()[0]
    if left_word[:1].isupper() and right_word[:1].isupper():
        return []
    return [left.strip(), right.strip()]


def split_clauses(query: str) -> list[str]:
    """The parts of a multi-part question ("?", ";", ", and what ..."); one part if it has one."""
    return [c.strip() for c in CLAUSE_SPLIT.split(query) if content_terms(c)]


def relation_terms(query: str) -> list[str]:
    """The question's content terms outside its named entities: what it asks about them (all
    its content terms when every one is part of an entity)."""
    terms = content_terms(query)
    entity_terms = {t for e in entity_phrases(query) for t in tokenize(e)}
    return [t for t in terms if t not in entity_terms] or terms


def decompose(query: str, ev: Evidence) -> list[list[str]]:
    clauses = split_clauses(query)
    split = clauses if len(clauses) > 1 else _entity_subqueries(query) or _and_subqueries(query)
    terms = content_terms(query)
    relation = relation_terms(query)
    # the second hop asks the bridge for what the evidence still lacks
    missing = [t for t in ev.missing_terms(relation) if t not in QUESTION_WORDS]
    focus = [t for t in profile(query).focus if t in relation]
    wanted = [h for h in ev.hints if h in relation] or missing or focus or relation
    names = ev.bridge_entities(query, limit=2)
    hinted = [n for n in names if n in ev.hints]  # the evaluator named the next hop: take it
    bridges = [" ".join([b, *wanted]) for b in hinted or names]
    candidates: list[list[str]] = []
    if split:
        candidates.append(split[:3] + bridges[:1])
    if bridges:
        candidates.append([" ".join(terms), *bridges])
    if len(terms) >= 2:
        half = (len(terms) + 1) // 2
        candidates.append([" ".join(terms[:half]), " ".join(terms[half:])])
    return candidates


def step_back(query: str, ev: Evidence) -> list[list[str]]:
    terms = content_terms(query)
    specific = {t for e in entity_phrases(query) for t in tokenize(e)}
    general = [t for t in terms if t not in specific and not is_number(t)]
    candidates: list[list[str]] = []
    if general and len(general) < len(terms):
        candidates.append([" ".join(general)])
    base = general or terms
    for keep in range(len(base) - 1, 0, -1):
        candidates.append([" ".join(base[:keep])])
    return candidates


_HYDE_PATTERNS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (re.compile(r"^(?:what|which)\s+(?:is|are|was|were)\s+(.+)$", re.I), lambda m: f"{m[1]} is"),
    (re.compile(r"^how\s+(?:does|do|did)\s+(.+?)\s+work$", re.I), lambda m: f"{m[1]} works by"),
    (re.compile(r"^how\s+(?:does|do|did|can|to)\s+(.+)$", re.I), lambda m: f"{m[1]} by"),
    (re.compile(r"^who\s+(\w+ed)\s+(.+)$", re.I), lambda m: f"{m[2]} was {m[1]} by"),
    (re.compile(r"^who\s+(?:is|was|are|were)\s+(.+)$", re.I), lambda m: f"{m[1]} is"),
    (re.compile(r"^when\s+(?:is|was|did|does|were)\s+(.+)$", re.I), lambda m: f"{m[1]} in"),
    (
        re.compile(r"^where\s+(?:is|was|are|were|did|does)\s+(.+)$", re.I),
        lambda m: f"{m[1]} is located in",
    ),
    (
        re.compile(r"^why\s+(?:is|was|are|were|does|do|did)\s+(.+)$", re.I),
        lambda m: f"{m[1]} because",
    ),
]


def hyde(query: str, ev: Evidence) -> list[list[str]]:
    question = _strip_question(query)
    sentence = next(
        (render(m) for pattern, render in _HYDE_PATTERNS if (m := pattern.match(question))),
        f"{' '.join(content_terms(question))} is",
    )
    terms = content_terms(query)
    feedback = ev.corpus.related_terms(query, terms, limit=3) if ev.corpus else []
    feedback = feedback or ev.feedback_terms(query, terms, limit=3)
    candidates = []
    if feedback:
        candidates.append([f"{sentence} {' '.join(feedback)}"])
    candidates.append([sentence])
    return candidates


def _corpus_vocabulary(query: str, terms: list[str], corpus: Corpus) -> list[str]:
    """The question's terms with each word the corpus never uses replaced by corpus words."""
    shifted: list[str] = []
    replaced = False
    for term in terms:
        if term in QUESTION_WORDS or corpus.mentions(term):
            shifted.append(term)
            continue
        substitutes = corpus.substitutes(term, query, limit=2)
        replaced = replaced or bool(substitutes)
        shifted.extend(substitutes)
    return shifted if replaced else []


def perspective_shift(query: str, ev: Evidence) -> list[list[str]]:
    terms = content_terms(query)
    entities = entity_phrases(query)
    in_corpus_words = _corpus_vocabulary(query, terms, ev.corpus) if ev.corpus else []
    # the words around the question's terms in the evidence; when no retrieved sentence shares
    # a term with the question (a full vocabulary mismatch), the evidence's salient terms
    neighbours = ev.neighbour_terms(query, terms, limit=5) or ev.feedback_terms(
        query, terms, limit=5
    )
    candidates: list[list[str]] = []
    if in_corpus_words:
        candidates.append([" ".join(in_corpus_words)])
    if neighbours:
        candidates.append([" ".join([*entities, *neighbours])])
        candidates.append([" ".join([*neighbours, *terms[:2]])])
    shifted = [t for t in terms if t not in QUESTION_WORDS]
    candidates.append([" ".join(_inflections(shifted) or shifted)])
    return candidates


STRATEGIES: dict[ReformulationStrategy, Callable[[str, Evidence], list[list[str]]]] = {
    ReformulationStrategy.EXPAND: expand,
    ReformulationStrategy.NARROW: narrow,
    ReformulationStrategy.DECOMPOSE: decompose,
    ReformulationStrategy.STEP_BACK: step_back,
    ReformulationStrategy.HYDE: hyde,
    ReformulationStrategy.PERSPECTIVE_SHIFT: perspective_shift,
}


def tried_queries(original_query: str, history: list[LoopIteration]) -> set[str]:
    """Normalised queries already sent in the run, the original question included."""
    tried = {normalize_query(original_query)}
    for it in history:
        tried.update(normalize_query(q) for q in (it.queries or it.query.split(" | ")))
    return tried


def _fallbacks(query: str, ev: Evidence) -> Iterable[list[str]]:
    terms = content_terms(query) or tokenize(query) or [query.strip() or "overview"]
    keywords = " ".join(terms)
    for term in ev.feedback_terms(query, terms, limit=8):
        yield [f"{keywords} {term}"]
    for facet in FACETS:
        yield [f"{keywords} {facet}"]
    for i, first in enumerate(FACETS):
        for second in FACETS[i + 1 :]:
            yield [f"{keywords} {first} {second}"]


def rewrite(
    strategy: ReformulationStrategy,
    query: str,
    history: list[LoopIteration],
    corpus: Corpus | None = None,
) -> tuple[list[str], str]:
    """New queries for ``strategy``, at least one never tried, and a note on how they were made.
    ``corpus`` lets the strategies consult the knowledge base itself."""
    ev = Evidence.from_history(history, corpus)
    tried = tried_queries(query, history)
    for n, candidate in enumerate(STRATEGIES[strategy](query, ev)):
        fresh = [q for q in candidate if q.strip() and normalize_query(q) not in tried]
        if fresh:
            note = "" if n == 0 else " (earlier candidates were already tried)"
            return fresh, f"{strategy.value} rewrite{note}"
    for candidate in _fallbacks(query, ev):
        if normalize_query(candidate[0]) not in tried:
            return candidate, f"{strategy.value} candidates all tried; added a new facet term"
    # Unreachable in practice (28 facet combinations), but a loop must never repeat itself.
    n = len(tried)
    while normalize_query(f"{query} {n}") in tried:
        n += 1
    return [f"{query} {n}"], "every candidate was tried; numbered the query"

"""Sentence-level evidence: which sentences of the retrieved chunks answer a question.

Shared by :class:`~ragloop.ExtractiveGenerator` (which picks the sentences) and
:class:`~ragloop.HeuristicEvaluator` (which checks what they cover). A sentence is scored by

- **lexical coverage**: the question's terms it contains, each weighted by its rarity among the
  candidate sentences (idf), names counting more; the chunk's title and headings count for half,
  since a passage often names its subject only there ("It weighs 1.6 kg" under "Skylark 2");
- **names**: the share of the question's named entities it mentions (with its context);
- **answer type**: whether it holds what the question asks for (a duration for "how long", an
  amount for "how much does it cost", ...); a sentence without it scores ``UNTYPED_FACTOR`` of
  what it would;
- **embedding similarity** to the question, when an embedder is given;
- the chunk's **retrieval score**.

With an embedder, a question term the best sentences do not contain counts (for
``SOFT_WEIGHT``) when one of their words is close to it in embedding space ("founded" and
"established"): :func:`soft_matches`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragloop.components.corpus import Corpus, chunk_context
from ragloop.components.questions import QuestionProfile, gives_answer_type, profile
from ragloop.components.text import (
    content_stems,
    content_terms,
    entity_phrases,
    sentence_units,
    stem,
    tokenize,
)
from ragloop.core.records import Chunk

# weights of the features, with and without embedding similarity
WEIGHTS = {"lexical": 0.5, "names": 0.1, "type": 0.15, "similarity": 0.2, "prior": 0.05}
WEIGHTS_LEXICAL_ONLY = {
    "lexical": 0.65,
    "names": 0.12,
    "type": 0.17,
    "similarity": 0.0,
    "prior": 0.06,
}
CONTEXT_WEIGHT = 0.5
MAX_SENTENCE_CHARS = 600
SOFT_SIMILARITY = 0.55  # word-to-word cosine at which a word says a question term in other words
SOFT_WEIGHT = 0.8
SOFT_CANDIDATES = 10  # best sentences checked for soft matches
EMBEDDED_SENTENCES = 12  # best sentences (scored without similarity) that get embedded
STAND_INS = 4  # corpus words that may stand for a question word the corpus never uses
UNTYPED_FACTOR = 0.6  # a sentence without the kind of answer asked for ("how heavy": a weight)
MIN_GAIN = 0.2  # share of the question's weight a further sentence must add
POINTER_SHARE = 0.3  # share of a sentence's new words a name must make up to be a pointer


@dataclass
class Sentence:
    """One sentence of a retrieved chunk, with what matching needs."""

    text: str
    chunk: int  # index of its chunk in the retrieved list
    position: int  # its place in the chunk
    context: str  # the chunk's title and headings
    stems: frozenset[str]
    context_stems: frozenset[str]
    soft_stems: frozenset[str] = frozenset()  # question terms it says in other words
    score: float = 0.0
    features: dict[str, float] = field(default_factory=dict)

    def has_name(self, name: str) -> bool:
        words = set(tokenize(name))
        return bool(words) and words <= set(tokenize(f"{self.context} {self.text}"))


def split_chunks(chunks: Sequence[Chunk]) -> list[Sentence]:
    """Every sentence of the chunks (headings and fragments without content words left out)."""
    out: list[Sentence] = []
    for index, chunk in enumerate(chunks):
        context = chunk_context(chunk)
        context_stems = frozenset(content_stems(context))
        for position, text in enumerate(sentence_units(chunk.content)):
            text = text.strip()
            if text.startswith("#") or len(text) > MAX_SENTENCE_CHARS:
                continue
            stems = frozenset(content_stems(text))
            if stems:
                out.append(Sentence(text, index, position, context, stems, context_stems))
    return out


@dataclass
class SentenceScorer:
    """Scores sentences for one question (see the module docstring)."""

    question: QuestionProfile
    sentences: list[Sentence]
    weights: dict[str, float] = field(default_factory=dict)  # stem -> importance

    @classmethod
    def build(cls, question: str | QuestionProfile, sentences: list[Sentence]) -> SentenceScorer:
        asked = profile(question) if isinstance(question, str) else question
        n = max(len(sentences), 1)
        names = {stem(t) for e in asked.entities for t in tokenize(e)}
        focus = {stem(t) for t in asked.focus}
        weights: dict[str, float] = {}
        for term in asked.stems:
            df = sum(1 for s in sentences if term in s.stems or term in s.context_stems)
            idf = math.log(1 + n / (1 + df))
            weights[term] = idf * (1.5 if term in names else 1.0) * (2.0 if term in focus else 1.0)
        return cls(asked, sentences, weights)

    def coverage(
        self,
        stems: frozenset[str] | set[str],
        context: frozenset[str] = frozenset(),
        context_weight: float = CONTEXT_WEIGHT,
        soft: frozenset[str] | set[str] = frozenset(),
    ) -> float:
        """The weighted share of the question's terms in ``stems``; a term found only in
        ``context`` (titles, headings) counts ``context_weight``, one said in other words
        (``soft``) ``SOFT_WEIGHT``."""
        total = sum(self.weights.values())
        if total <= 0:
            return 0.0
        got = 0.0
        for term, weight in self.weights.items():
            if term in stems:
                got += weight
            elif term in context:
                got += weight * context_weight
            elif term in soft:
                got += weight * SOFT_WEIGHT
        return got / total

    def names_share(self, sentence: Sentence) -> float:
        if not self.question.entities:
            return 0.0
        return sum(sentence.has_name(e) for e in self.question.entities) / len(
            self.question.entities
        )

    def score(
        self,
        chunks: Sequence[Chunk],
        similarity: Sequence[float] | None = None,
        corpus: Corpus | None = None,
    ) -> list[Sentence]:
        """Score every sentence in place; returns them best first. With ``corpus`` (and its
        embedder) the best sentences are checked for question terms said in other words."""
        ranked = self._score(chunks, similarity)
        if corpus is not None and corpus.embedder is not None:
            stand_ins = stand_in_stems(corpus, self.question)
            for sentence in self.sentences:  # a word the corpus never uses, said its way
                words = sentence.stems | sentence.context_stems
                sentence.soft_stems = frozenset(t for t, ins in stand_ins.items() if ins & words)
            top = ranked[:SOFT_CANDIDATES]
            for sentence, soft in zip(
                top, soft_matches(corpus, self.question.terms, [s.text for s in top]), strict=True
            ):
                own = sentence.stems | sentence.context_stems
                sentence.soft_stems = frozenset((soft | sentence.soft_stems) - own)
            ranked = self._score(chunks, similarity)
        return ranked

    def _score(self, chunks: Sequence[Chunk], similarity: Sequence[float] | None) -> list[Sentence]:
        weights = WEIGHTS if similarity is not None else WEIGHTS_LEXICAL_ONLY
        typed = self.question.answer_type not in (None, "yesno")
        for i, sentence in enumerate(self.sentences):
            features = {
                "lexical": self.coverage(
                    sentence.stems, sentence.context_stems, soft=sentence.soft_stems
                ),
                "names": self.names_share(sentence),
                "type": float(
                    self.question.answer_type not in (None, "yesno")
                    and gives_answer_type(
                        self.question.answer_type, sentence.text, self.question.text
                    )
                ),
                "similarity": max(float(similarity[i]), 0.0) if similarity is not None else 0.0,
                "prior": chunks[sentence.chunk].score / (1 + 0.1 * sentence.chunk),
            }
            sentence.features = features
            sentence.score = sum(weights[k] * v for k, v in features.items())
            if typed and not features["type"]:  # it cannot be the answer itself
                sentence.score *= UNTYPED_FACTOR
        return sorted(self.sentences, key=lambda s: (-s.score, s.chunk, s.position))


def stand_in_stems(corpus: Corpus, question: QuestionProfile) -> dict[str, frozenset[str]]:
    """For each question term the corpus never uses, the stems of the corpus words that could
    stand for it (:meth:`Corpus.substitutes`); empty without an embedder."""
    if corpus.embedder is None:
        return {}
    out: dict[str, frozenset[str]] = {}
    for term in question.terms:
        if not corpus.mentions(term):
            words = corpus.substitutes(term, question.text, limit=STAND_INS)
            if words:
                out[stem(term)] = frozenset(stem(w) for w in words)
    return out


def soft_matches(corpus: Corpus, terms: list[str], texts: list[str]) -> list[set[str]]:
    """For each text, the stems of the ``terms`` it does not contain but has a word close to in
    embedding space (cosine >= ``SOFT_SIMILARITY``). Needs the corpus's embedder."""
    if corpus.embedder is None or not terms or not texts:
        return [set() for _ in texts]
    words_of = [
        [w for w in content_terms(t) if w not in terms and not w[0].isdigit()] for t in texts
    ]
    vocabulary = list(dict.fromkeys(w for words in words_of for w in words))
    if not vocabulary:
        return [set() for _ in texts]
    term_vectors = corpus.vectors(terms)
    word_vectors = corpus.vectors(vocabulary)
    close = (word_vectors @ term_vectors.T) >= SOFT_SIMILARITY  # words x terms
    row = {w: i for i, w in enumerate(vocabulary)}
    out: list[set[str]] = []
    for text, words in zip(texts, words_of, strict=True):
        own = content_stems(text)
        hits = {stem(terms[j]) for w in words for j in range(len(terms)) if close[row[w], j]}
        out.append(hits - own)
    return out


def sentence_similarity(
    corpus: Corpus | None, scorer: SentenceScorer, chunks: Sequence[Chunk]
) -> list[float] | None:
    """Cosine similarity of each of the scorer's sentences to the question (None without an
    embedder).

    Embedding is most of an extractive answer's cost, so only the ``EMBEDDED_SENTENCES``
    sentences that score best without it are embedded; the others get the lowest similarity
    found among those, so the feature can lift a sentence but never pushes an unembedded one
    past an embedded one that scored better.
    """
    sentences = scorer.sentences
    if corpus is None or corpus.embedder is None or not sentences:
        return None
    chosen = sentences
    if len(sentences) > EMBEDDED_SENTENCES:
        chosen = scorer._score(chunks, None)[:EMBEDDED_SENTENCES]
    sims = corpus.similarity(scorer.question.text, [s.text for s in chosen])
    if sims is None:
        return None
    by_sentence = {id(s): float(x) for s, x in zip(chosen, sims, strict=True)}
    floor = min(by_sentence.values())
    return [by_sentence.get(id(s), floor) for s in sentences]


def new_names(sentence: Sentence, question: QuestionProfile) -> list[str]:
    """Names a sentence mentions that the question does not (candidate bridges)."""
    asked = {t for e in question.entities for t in tokenize(e)} | set(question.terms)
    return [e for e in entity_phrases(sentence.text) if not set(tokenize(e)) <= asked]


def pointer_names(text: str, question: QuestionProfile) -> list[str]:
    """Names that make up most of what a sentence adds to the question ("it is covered by the
    Fellside Guarantee"): the sentence defers to that name's document for the answer."""
    asked = set(tokenize(question.text))
    news = [t for t in content_terms(text) if t not in asked]
    out = []
    for name in entity_phrases(text):
        words = set(tokenize(name))
        if news and not words <= asked and len(words & set(news)) / len(news) >= POINTER_SHARE:
            out.append(name)
    return out


def select(
    scorer: SentenceScorer, ranked: list[Sentence], *, max_sentences: int = 3
) -> list[Sentence]:
    """The sentences of an answer: the best one; then, for each part of a multi-part question
    not yet answered, its best sentence; then sentences that add uncovered question terms and
    continue what was chosen; then, for a sentence that only points to another document, that
    document's best sentence. At most ``max_sentences``."""
    asked = scorer.question.stems
    if (
        not ranked
        or ranked[0].score <= 0
        or not (ranked[0].stems | ranked[0].context_stems) & asked
    ):
        return []
    chosen = [ranked[0]]
    _add_parts(scorer, ranked, chosen, max_sentences)
    _add_continuations(scorer, ranked, chosen, max_sentences)
    _follow_pointers(scorer, ranked, chosen, max_sentences)
    return chosen


def _covered(chosen: list[Sentence]) -> set[str]:
    return set().union(*(s.stems | s.context_stems | s.soft_stems for s in chosen))


def _add_parts(
    scorer: SentenceScorer, ranked: list[Sentence], chosen: list[Sentence], limit: int
) -> None:
    for part in scorer.question.parts if scorer.question.is_multi_part else []:
        covered = _covered(chosen)
        part_stems = content_stems(part) & set(scorer.weights)
        if len(chosen) >= limit or len(part_stems & covered) * 2 >= len(part_stems):
            continue  # no room, or the sentences chosen so far already answer this part
        part_stems -= covered
        best = max(
            (s for s in ranked if s not in chosen and s.stems & part_stems),
            key=lambda s: (
                len(s.stems & part_stems)
                + 0.5 * len((s.context_stems | s.soft_stems) & part_stems),
                s.score,
            ),
            default=None,
        )
        if best is not None:
            chosen.append(best)


def _add_continuations(
    scorer: SentenceScorer, ranked: list[Sentence], chosen: list[Sentence], limit: int
) -> None:
    """Sentences that add uncovered question terms and continue what was chosen: the same
    chunk, one of the question's names, or a name a chosen sentence introduced (a bridge)."""
    total = sum(scorer.weights.values()) or 1.0
    floor = chosen[0].score * 0.5
    while len(chosen) < limit:
        missing = set(scorer.weights) - _covered(chosen)
        bridges = [n for s in chosen for n in new_names(s, scorer.question)]
        best_gain, best = 0.0, None
        for s in ranked:
            if s in chosen or s.score < floor * (0.4 if bridges else 1.0):
                continue
            gain = sum(
                scorer.weights[t] for t in missing & (s.stems | s.context_stems | s.soft_stems)
            )
            linked = any(s.has_name(n) for n in bridges) and s.chunk != chosen[0].chunk
            related = (
                linked
                or any(s.chunk == c.chunk for c in chosen)
                or any(s.has_name(e) for e in scorer.question.entities)
            )
            if not related or gain < MIN_GAIN * total:
                continue
            if linked:
                gain *= 1.5
            if gain > best_gain:
                best_gain, best = gain, s
        if best is None:
            return
        chosen.append(best)


def _follow_pointers(
    scorer: SentenceScorer, ranked: list[Sentence], chosen: list[Sentence], limit: int
) -> None:
    """A sentence that defers to another document ("covered by the Fellside Guarantee") is
    followed by that document's best sentence, if it was retrieved."""
    for sentence in list(chosen):
        for name in pointer_names(sentence.text, scorer.question):
            if len(chosen) >= limit or any(c is not sentence and c.has_name(name) for c in chosen):
                continue
            there = [s for s in ranked if s.chunk != sentence.chunk and name in s.context]
            if there:
                chosen.append(there[0])

"""How sure an offline judge can be that an answer is right, without a model.

:class:`AnswerJudge` reads an answer against the question, the retrieved chunks and (given one)
the knowledge base, the way :class:`~ragloop.HeuristicEvaluator` and
:class:`~ragloop.ExtractiveGenerator` both need it:

- **coverage**: the question's terms the answer says (a chunk heading it quotes from counts, a
  word said in other words counts, a term found only inside a longer code name does not:
  ``strict`` is not ``strict_timestamps``), weighted by rarity; only the claims on the
  question's topic count (:func:`on_topic`), so an unrelated sentence that repeats some of
  the question's words does not pad the score;
- **names**: the question's names (people, places, code names such as ``json.loads``) the
  answer gives, with the headings it quotes from;
- **similarity**: the best embedding cosine of an answer sentence to the question;
- **answer type**: whether the answer holds what was asked for (a duration, an exception's name,
  a version, a default value, ...): part of "complete", not of the chance (fitted at 0.00);
- **foreign terms**: the weight of question words the documents never use, nothing in the
  answer stands for, and that are names or jargon rather than everyday English (a question
  about ``bitcoin`` in a shop handbook). A generic word such as "policy" or "happens" that no
  document uses is not missing content, and coverage leaves it out; an everyday content word
  ("rent") that nothing in the answer stands for is missing from coverage;
- **parts** and **grounding**, and how much the question asks (its
  number of content terms: a long question is harder to answer with a few quoted sentences).

:func:`answer_probability` turns these into the chance that the answer is right: a logistic
regression fitted by ``benchmarks/calibrate_offline.py`` on HotpotQA and MuSiQue questions
outside the benchmarks' samples, both as retrieved and with their gold passages taken away
(questions the documents cannot answer), so that a score of 0.6 means "right about three times
in five" (docs/offline.md and BENCHMARKS.md show how well that holds, there and on the Python
docs). An unfinished answer is capped (:func:`answer_probability`).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragloop.components.citations import NO_ANSWER, answer_text
from ragloop.components.grounding import LexicalGrounder
from ragloop.components.heuristics.corpus import Corpus, chunk_context, chunk_text
from ragloop.components.heuristics.extractive import (
    STAND_INS,
    VALUE_TYPES,
    SentenceScorer,
    code_name_found,
    embedded_text,
    logistic,
    soft_matches,
    split_chunks,
)
from ragloop.components.heuristics.questions import (
    QuestionProfile,
    gives_answer_type,
    is_generic,
    profile,
)
from ragloop.components.heuristics.selection import pointer_names
from ragloop.core.records import Chunk
from ragloop.core.text import (
    code_names,
    content_stems,
    entity_phrases,
    is_common_word,
    loose_stems,
    says_word,
    sentence_units,
    stem,
    tokenize,
)

MANY_TERMS = 12  # a question with this many content terms asks a lot (multi-hop, multi-part)
RECENT_ANALYSES = 64  # analyses an AnswerJudge keeps (one loop's generator and evaluator share)
SUPPORT_SIMILARITY = 0.85  # embedding cosine at which a paraphrase counts as supported
COMPLETE_COVERAGE = 0.75  # weighted share of the question's terms a complete answer covers
UNFINISHED_AT_MOST = 0.4  # the most an unfinished answer (a part or hop missing) can score


@dataclass
class Analysis:
    """What :class:`AnswerJudge` found about an answer, before it becomes a verdict."""

    missing: list[str] = field(default_factory=list)  # question terms no chunk contains
    foreign: list[str] = field(default_factory=list)  # ... that the corpus never uses
    stand_ins: dict[str, list[str]] = field(default_factory=dict)  # foreign term -> corpus words
    read_as: dict[str, list[str]] = field(default_factory=dict)  # ... of which the answer uses
    evidence_coverage: float = 0.0  # the question's terms the chunks cover (the reason's)
    answered: bool = False
    answer_coverage: float = 0.0
    grounded_share: float = 0.0
    unsupported: list[str] = field(default_factory=list)
    uncovered_parts: list[tuple[int, str]] = field(default_factory=list)
    # part index -> the answer's claim that answers it and its chunk (the whole question: 0)
    part_sources: dict[int, tuple[str, Chunk]] = field(default_factory=dict)
    type_found: bool = True
    focus_missing: list[str] = field(default_factory=list)  # the asked-for thing, not answered
    hops: list[str] = field(default_factory=list)  # names the answer points to, not retrieved
    bridges: list[str] = field(default_factory=list)  # names the chunks point to, not retrieved
    named: list[str] = field(default_factory=list)  # names the answer brings in
    similarity: float = 0.0  # best embedding cosine of an answer sentence to the question
    names_given: float = 1.0  # share of the question's names (entities, code) the answer gives
    foreign_share: float = 0.0  # weight of question terms no document uses, none standing in
    unknown_names: list[str] = field(default_factory=list)  # ... that are names or jargon
    embedded: bool = False  # whether the judge had an embedder (similarity, other words)

    @property
    def unresolved(self) -> list[str]:
        """Missing terms that nothing in the chunks stands for."""
        return [t for t in self.missing if t not in self.stand_ins]

    @property
    def complete(self) -> bool:
        return (
            self.answered
            and not self.unresolved
            and not self.uncovered_parts
            and self.type_found
            and not self.focus_missing
            and not self.hops
            and self.answer_coverage >= COMPLETE_COVERAGE
        )


# The chance that an answer is right: logistic(bias + sum(w * feature)), fitted by
# benchmarks/calibrate_offline.py (see the module docstring).
ANSWER_FEATURES = (
    "coverage",
    "names",
    "similarity",
    "length",
    "foreign",
    "parts_missing",
    "ungrounded",
)
ANSWER_COEFFICIENTS = {
    "bias": -3.87,
    "coverage": 1.85,
    "names": 0.85,
    "similarity": 3.08,
    "length": -0.68,
    "foreign": -1.26,
    "parts_missing": 0.00,
    "ungrounded": -3.0,  # not fitted: extractive answers are always grounded (see above)
}


ANSWER_LEXICAL = {  # the same without an embedder
    "bias": -2.96,
    "coverage": 2.20,
    "names": 1.43,
    "length": -0.09,
    "foreign": 0.00,
    "parts_missing": -0.61,
    "ungrounded": -3.0,
}


def answer_features(asked: QuestionProfile, found: Analysis) -> dict[str, float]:
    """The features of :data:`ANSWER_FEATURES` (all in [0, 1])."""
    return {
        "coverage": found.answer_coverage,
        "names": found.names_given,
        "similarity": found.similarity,
        "length": min(len(asked.terms), MANY_TERMS) / MANY_TERMS,
        "foreign": min(found.foreign_share, 1.0),
        "parts_missing": len(found.uncovered_parts) / max(len(asked.parts), 1),
        "ungrounded": 1.0 - found.grounded_share,
    }


def answer_probability(asked: QuestionProfile, found: Analysis) -> float:
    """The chance that the answer analysed is right (0 when there is no answer). An answer
    that leaves a part of the question uncovered, or points to a document not yet read for
    what was asked (a second hop), is unfinished whatever its other features say, and one to
    a question about a name or term no document mentions ("gunicorn", "bitcoin") answers
    something else: either gets at most :data:`UNFINISHED_AT_MOST`, so a loop goes on (or
    says it found nothing)."""
    if not found.answered:
        return 0.0
    coefficients = ANSWER_COEFFICIENTS if found.embedded else ANSWER_LEXICAL
    probability = logistic(coefficients, answer_features(asked, found))
    if found.hops or found.uncovered_parts or found.unknown_names:
        return min(probability, UNFINISHED_AT_MOST)
    return probability


def names_given(asked: QuestionProfile, text: str, backing: list[Chunk]) -> float:
    """The share of the question's names (entities and code names) that the answer gives, in
    its words or in the titles and headings of the chunks it rests on (1.0 when the question
    names nothing)."""
    code = list(asked.identifiers)
    entities = [e for e in asked.entities if e not in code]
    if not code and not entities:
        return 1.0
    where = " ".join([text, *(chunk_context(c) for c in backing)])
    words = set(tokenize(where))
    stems = frozenset(content_stems(where))
    loose = frozenset(loose_stems(where))
    found = float(sum(bool(words) and set(tokenize(e)) <= words for e in entities))
    found += sum(code_name_found(name, where, stems, loose) for name in code)
    return found / (len(code) + len(entities))


def part_answered(
    part: str, weighted: frozenset[str], claim: str, chunk: Chunk, also: frozenset[str]
) -> bool:
    """Whether one claim of an answer, read under its chunk's headings, answers one part of a
    multi-part question: it says at least half of the part's weighted terms, names the part's
    code names ("the default indent of json.dumps()" is not answered by another argument of
    json.dumps()) and gives a value of the kind the part asks for (a version,
    a number, ...). Words gathered from different claims do not answer a part: "added in
    Python 3.9" (about classmethod) and "typing.Self: see PEP 673" do not say when typing.Self
    was added."""
    where = f"{chunk_context(chunk)} {claim}"
    stems = frozenset(content_stems(where))
    wanted = content_stems(part) & weighted
    if wanted and len(wanted & (stems | also)) * 2 < len(wanted):
        return False
    # named verbatim (or a dotted name by its last part): ``typing.Self`` is not any "self"
    if not all(code_name_found(n, where, stems) == 1.0 for n in code_names(part)):
        return False
    kind = profile(part).answer_type
    return kind not in VALUE_TYPES or gives_answer_type(kind, claim, part)


def on_topic(
    asked: QuestionProfile, units: list[tuple[str, Chunk]], anchors: list[tuple[str, Chunk]]
) -> list[tuple[str, Chunk]]:
    """The claims of an answer that speak to the question: its first claim and those that
    answer a part of it, and the claims linked to them: from the same document, naming one of
    the question's names as written (in the claim or its headings), or from the document of a
    name a linked claim brings in (a bridge to a second hop: "... in the video game Tomb
    Raider." then a claim under the title "Tomb Raider"). A claim from another document that
    only repeats some of the question's everyday words ("The heapq module provides functions
    ..." after the bisect module's answer) adds nothing the question asked for, and its words
    do not count."""
    if not units:
        return []
    kept = [units[0], *(a for a in anchors if a is not units[0])]
    rest = [u for u in units if u not in kept]
    entities = [e for e in asked.entities if e not in asked.identifiers]
    grew = True
    while rest and grew:
        sources = {c.source for _, c in kept}
        bridges = [
            name
            for claim, _ in kept
            for name in entity_phrases(claim)
            if not set(tokenize(name)) <= set(tokenize(asked.text))
        ]
        linked = [
            (claim, c)
            for claim, c in rest
            if c.source in sources
            or names_any(f"{chunk_context(c)} {claim}", asked.identifiers, entities)
            or names_any(chunk_context(c), (), bridges)
        ]
        grew = bool(linked)
        kept += linked
        rest = [u for u in rest if u not in linked]
    return [u for u in units if u in kept]


def names_any(text: str, code: Sequence[str], names: Sequence[str]) -> bool:
    """Whether ``text`` gives one of the code names verbatim (a dotted one by its last part:
    ``bisect_right`` for ``bisect.bisect_right``) or says every word of one of the names as
    written ("Python", not "python")."""
    stems = frozenset(content_stems(text))
    if any(code_name_found(n, text, stems) == 1.0 for n in code):
        return True
    return any(n.split() and all(says_word(text, w) for w in n.split()) for n in names)


def in_corpus_words(question: str, read_as: dict[str, list[str]]) -> str:
    """``question`` with each everyday word the documents never use replaced by the corpus
    word the answer uses for it (``read_as``: term -> stand-ins, first the best). A name or
    jargon is not read as another word: "bitcoin" read as "PayPal" is another question."""
    words = {
        term.lower(): stand_ins[0]
        for term, stand_ins in read_as.items()
        if stand_ins and is_common_word(term)
    }
    if not words:
        return question
    return re.sub(r"[A-Za-z][\w'-]*", lambda m: words.get(m[0].lower(), m[0]), question)


class AnswerJudge:
    """Analyses an answer (see the module docstring). ``corpus`` (a
    :class:`~ragloop.KnowledgeBase`, a retriever or a ``Corpus``) lets it check which words the
    documents use at all, follow the link graph and use the embedder."""

    def __init__(self, *, corpus: object = None, grounder: LexicalGrounder | None = None) -> None:
        self.corpus = None if corpus is None else Corpus.of(corpus)
        self.grounder = grounder or LexicalGrounder()
        self._lock = threading.Lock()
        self._recent: OrderedDict[tuple[object, ...], Analysis] = OrderedDict()

    # -- analysis -------------------------------------------------------------------------------
    def analyse(self, asked: QuestionProfile, chunks: list[Chunk], answer: str) -> Analysis:
        """Coverage, grounding, parts, answer type and hops of ``answer`` (see the class). The
        last few analyses are kept, so a generator and an evaluator that share a judge analyse
        an answer once."""
        key = (asked.text, answer, tuple((c.id, c.source, c.score, len(c.content)) for c in chunks))
        with self._lock:
            if key in self._recent:
                self._recent.move_to_end(key)
                return self._recent[key]
        found = self._analyse(asked, chunks, answer)
        with self._lock:
            self._recent[key] = found
            while len(self._recent) > RECENT_ANALYSES:
                self._recent.popitem(last=False)
        return found

    def _analyse(self, asked: QuestionProfile, chunks: list[Chunk], answer: str) -> Analysis:
        found = Analysis(embedded=self.corpus is not None and self.corpus.embedder is not None)
        scorer = SentenceScorer.build(asked, split_chunks(chunks))
        self._check_evidence(asked, chunks, scorer, found)
        text = answer_text(answer)
        found.answered = bool(text) and text != NO_ANSWER
        if found.answered:
            self._check_answer(asked, chunks, text, scorer, found)
        else:
            found.type_found = asked.answer_type in (None, "yesno")
        return found

    def _check_evidence(
        self, asked: QuestionProfile, chunks: list[Chunk], scorer: SentenceScorer, found: Analysis
    ) -> None:
        """Which question terms the chunks lack, and what may stand for them."""
        texts = " ".join(chunk_text(c) for c in chunks)
        evidence = set(scorer.as_written(content_stems(texts), texts))
        found.missing = [t for t in asked.terms if stem(t) not in evidence]
        if self.corpus is not None:
            # a word the documents never use needs corpus words standing for it ...
            found.foreign = [t for t in found.missing if not self.corpus.mentions(t)]
            # ... but a word of a code name is only ever itself (``splitroot`` is not
            # ``splitdrive``)
            for term in [t for t in found.foreign if stem(t) not in scorer.code_words]:
                words = self.corpus.substitutes(term, asked.text, limit=STAND_INS)
                present = [w for w in words if stem(w) in evidence]
                if present:
                    found.stand_ins[term] = present
            # ... one they do use may be said in other words in the best chunks
            others = [
                t
                for t in found.missing
                if t not in found.foreign and stem(t) not in scorer.code_words
            ]
            top = [chunk_text(c) for c in chunks[:3]]
            near = set().union(*soft_matches(self.corpus, others, top)) if others else set()
            found.missing = [t for t in found.missing if stem(t) not in near]
        resolved = {stem(t) for t in found.stand_ins}
        found.evidence_coverage = scorer.coverage(evidence | resolved)
        found.bridges = self._bridges(asked, chunks)

    def _check_answer(
        self,
        asked: QuestionProfile,
        chunks: list[Chunk],
        text: str,
        scorer: SentenceScorer,
        found: Analysis,
    ) -> None:
        """Grounding, coverage, parts, answer type, focus and hops of the answer's text."""
        sentences = sentence_units(text)
        units = self._ground(text, chunks, found)
        backing = list({c.id: c for _, c in units}.values())
        everywhere = " ".join([text, *(chunk_context(c) for c in backing)])
        used_words = set(content_stems(everywhere))
        for term, words in found.stand_ins.items():
            used = [w for w in words if stem(w) in used_words]
            if used:
                found.read_as[term] = used
        soft = (
            set().union(*soft_matches(self.corpus, asked.terms, [text])) if self.corpus else set()
        )
        if asked.is_multi_part:
            weighted = frozenset(scorer.weights)
            # question words the answer says in other words count wherever they are said
            also = frozenset({stem(t) for t in found.read_as} | soft)
            for i, part in enumerate(asked.parts):
                answering = (
                    (claim, c)
                    for claim, c in units
                    if part_answered(part, weighted, claim, c, also)
                )
                source = next(answering, None)
                if source is None:
                    found.uncovered_parts.append((i, part))
                else:
                    found.part_sources[i] = source
        elif units:
            found.part_sources[0] = units[0]
        # what the answer says about the question: its claims on the question's topic
        topical = on_topic(asked, units, list(found.part_sources.values()))
        said_text = " ".join([t for t, _ in topical] + found.unsupported) if units else text
        headings = " ".join(chunk_context(c) for c in {c.id: c for _, c in topical}.values())
        context = scorer.as_written(content_stems(headings), headings)
        said = set(scorer.as_written(content_stems(said_text), said_text))
        present = said | context
        said |= {stem(t) for t, ws in found.read_as.items() if {stem(w) for w in ws} & present}
        # A word no document uses, and nothing in the answer stands for, is either a generic
        # word ("policy", "happens": no answer needs to say it, so it is not missing content),
        # an everyday word the answer misses ("rent" answered about cooking), or a name the
        # documents never mention ("bitcoin": they do not cover it, a heavier fault).
        unread = [t for t in found.foreign if t not in found.read_as and stem(t) not in soft]
        generic = {stem(t) for t in unread if is_generic(t)}
        loose = loose_stems(said_text) - content_stems(headings)
        found.answer_coverage = scorer.coverage(
            said,
            context,
            context_weight=1.0,
            soft=soft - scorer.code_words.keys(),
            loose=loose,
            ignore=generic,
        )
        found.names_given = names_given(asked, text, backing)
        found.similarity = self._similarity(asked, chunks, sentences, found.read_as)
        weights = scorer.weights
        total = sum(weights.values()) or 1.0
        names = [t for t in unread if not is_common_word(t) and stem(t) not in generic]
        found.foreign_share = sum(weights.get(stem(t), 0.0) for t in names) / total
        found.unknown_names = names
        found.focus_missing = [t for t in asked.focus if stem(t) not in said | context | soft]
        found.type_found = any(
            gives_answer_type(asked.answer_type, s, asked.text) for s in sentences
        )
        found.hops = self._hops(asked, chunks, backing, sentences)
        asked_words = set(tokenize(asked.text))
        found.named = list(
            dict.fromkeys(
                name
                for sentence in sentences
                for name in entity_phrases(sentence)
                if not set(tokenize(name)) <= asked_words
            )
        )

    def _ground(self, text: str, chunks: list[Chunk], found: Analysis) -> list[tuple[str, Chunk]]:
        """Set the grounded share and unsupported sentences; return the answer's supported
        claims, each with the chunk it rests on (its best source)."""
        grounding = self.grounder.ground(text, chunks)
        by_id = {c.id: c for c in chunks}
        units = [
            (span.text, by_id[span.sources[0].chunk_id])
            for span in grounding.faithful_spans
            if span.sources and span.sources[0].chunk_id in by_id
        ]
        claims = len(grounding.faithful_spans) + len(grounding.hallucinated_spans)
        supported = len(grounding.faithful_spans)
        for span in grounding.hallucinated_spans:
            source = self._paraphrased(span.text, chunks)
            if source is not None:
                supported += 1
                units.append((span.text, source))
            else:
                found.unsupported.append(span.text)
        found.grounded_share = supported / claims if claims else 0.0
        return units

    def _similarity(
        self,
        asked: QuestionProfile,
        chunks: list[Chunk],
        sentences: list[str],
        read_as: dict[str, list[str]],
    ) -> float:
        """The best embedding cosine of an answer sentence to the question, each quoted
        sentence read under its heading as the generator read it (0 without an embedder). A
        question that uses words the documents never do is also read in the documents' words
        (each such word replaced by the stand-in the answer uses: "the refund policy for
        international orders" as "the returned policy for abroad orders"), and the closer of
        the two readings counts: the embedder compares meanings best in one vocabulary."""
        if self.corpus is None or self.corpus.embedder is None or not sentences:
            return 0.0
        units = {" ".join(s.text.split()): s for s in split_chunks(chunks)}
        texts = []
        for sentence in sentences:
            key = " ".join(sentence.split())
            # a unit quoted after a name ("`timeit`: This module ...") is read as the unit
            named = key.split(": ", 1)[-1] if key.startswith("`") else key
            unit = units.get(key) or units.get(named)
            texts.append(embedded_text(unit) if unit is not None else sentence)
        best = 0.0
        for question in dict.fromkeys([asked.text, in_corpus_words(asked.text, read_as)]):
            sims = self.corpus.similarity(question, texts)
            if sims is not None and len(sims):
                best = max(best, float(sims.max()))
        return best

    def _paraphrased(self, claim: str, chunks: list[Chunk]) -> Chunk | None:
        """The chunk with a sentence whose embedding is close to ``claim``, if any."""
        if self.corpus is None or self.corpus.embedder is None:
            return None
        sentences = split_chunks(chunks)
        sims = self.corpus.similarity(claim, [s.text for s in sentences])
        if sims is None or not len(sims):
            return None
        best = int(sims.argmax())
        return chunks[sentences[best].chunk] if sims[best] >= SUPPORT_SIMILARITY else None

    def _bridges(self, asked: QuestionProfile, chunks: list[Chunk]) -> list[str]:
        """Documents the best chunks name (link graph) that the question does not."""
        if self.corpus is None:
            return []
        asked_words = set(tokenize(asked.text))
        return [b for b in self.corpus.bridges(chunks[:3]) if not set(tokenize(b)) <= asked_words]

    def _hops(
        self,
        asked: QuestionProfile,
        chunks: list[Chunk],
        backing: list[Chunk],
        sentences: list[str],
    ) -> list[str]:
        """Names of documents the answer points to (link graph) that no chunk comes from: a
        sentence whose news is mostly such a name defers to a document not yet read."""
        if self.corpus is None or not backing:
            return []
        retrieved = {c.source for c in chunks}
        # a quoted sentence may lead with its section's name ("Price and warranty: ...")
        said = [part for sentence in sentences for part in {sentence, sentence.split(": ", 1)[-1]}]
        pointers = {n for sentence in said for n in pointer_names(sentence, asked)}
        hops = [
            str(target.metadata.get("mention"))
            for target in self.corpus.linked(backing)
            if target.source not in retrieved and target.metadata.get("mention") in pointers
        ]
        return list(dict.fromkeys(hops))

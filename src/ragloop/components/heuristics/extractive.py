"""Sentence-level evidence: how well each sentence of the retrieved chunks answers a question
(which of them make the answer: :mod:`ragloop.components.heuristics.selection`).

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
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragloop.components.heuristics.corpus import Corpus, chunk_context
from ragloop.components.heuristics.questions import (
    QuestionProfile,
    gives_answer_type,
    profile,
)
from ragloop.core.records import Chunk
from ragloop.core.text import (
    PassageUnit,
    code_names,
    content_stems,
    content_terms,
    loose_stems,
    passage_units,
    says_word,
    stem,
    tokenize,
)

# A sentence's score is a logistic function of its features, with and without an embedder;
# the coefficients are fitted by benchmarks/calibrate_offline.py on HotpotQA questions outside
# the benchmarks' samples (a sentence is right when it contains the gold answer).
SENTENCE_FEATURES = ("lexical", "names", "type", "untyped", "similarity", "prior", "lead")
SENTENCE_COEFFICIENTS = {
    "bias": -5.51,
    "lexical": 2.29,
    "names": 0.36,
    "type": 0.70,
    "untyped": -0.70,
    "similarity": 1.25,
    "prior": 1.69,
    "lead": 0.78,
}
SENTENCE_LEXICAL = {
    "bias": -5.15,
    "lexical": 2.42,
    "names": 0.43,
    "type": 0.75,
    "untyped": -0.75,
    "prior": 2.08,
    "lead": 0.83,
}
CONTEXT_WEIGHT = 0.5
MAX_SENTENCE_CHARS = 600
SOFT_SIMILARITY = 0.55  # word-to-word cosine at which a word says a question term in other words
SOFT_WEIGHT = 0.8
SOFT_CANDIDATES = 10  # best sentences checked for soft matches
EMBEDDED_SENTENCES = 32  # best sentences (scored without similarity) that get embedded
STAND_INS = 4  # corpus words that may stand for a question word the corpus never uses
CODE_FACTOR = 0.7  # a piece of code, against a sentence that says the same
NEGATIVE_PREFIXES = ("un", "in", "im", "il", "ir", "non")  # "unsupported" says "not supported"
LOOSE_WEIGHT = 0.25  # a question term found only inside a longer compound name
# answers the documentation names in a section's heading ("exception RecursionError", "json.dumps
# (obj, ...)") and then describes ("It is raised when ..."): a unit gives them with its heading
HEADING_NAMED = frozenset({"api", "exception"})
# answer types whose presence a pattern checks reliably (a person's or a place's name is not)
VALUE_TYPES = frozenset(
    {"weight", "amount", "duration", "time", "number", "date", "exception", "version", "default"}
)


@dataclass
class Sentence:
    """One unit of a retrieved chunk (a sentence, a table row or a piece of code), with what
    matching needs."""

    text: str
    chunk: int  # index of its chunk in the retrieved list
    position: int  # its place in the chunk
    context: str  # the chunk's title and headings, and the heading it sits under in the chunk
    stems: frozenset[str]
    context_stems: frozenset[str]
    soft_stems: frozenset[str] = frozenset()  # question terms it says in other words
    score: float = 0.0
    features: dict[str, float] = field(default_factory=dict)
    kind: str = "prose"  # "prose" | "row" | "code" | "signature"
    heading: str = ""  # the heading it sits under inside its chunk, else the chunk's last one
    loose_stems: frozenset[str] = frozenset()  # stems it has only inside compound names
    lead: bool = False  # the first unit of its chunk, or the first under a heading in it
    title: str = ""  # the title of its chunk's document

    def has_name(self, name: str) -> bool:
        words = set(tokenize(name))
        return bool(words) and words <= set(tokenize(f"{self.context} {self.text}"))

    def says_name(self, name: str) -> bool:
        """Whether its text or its headings say ``name`` whole: "Python 3.11", not "3.11"
        under a title that says "Python"."""
        words = tokenize(name)
        return bool(words) and any(
            _has_run(tokenize(where), words) for where in (self.text, self.context)
        )

    def names_code(self, name: str) -> float:
        """How exactly it names a code name of the question (:func:`code_name_found`)."""
        return code_name_found(
            name, f"{self.context} {self.text}", self.stems | self.context_stems, self.loose_stems
        )


def _has_run(tokens: list[str], words: list[str]) -> bool:
    n = len(words)
    return any(tokens[i : i + n] == words for i in range(len(tokens) - n + 1))


def code_name_found(
    name: str, where: str, stems: frozenset[str], loose: frozenset[str] = frozenset()
) -> float:
    """How exactly ``where`` (a text with its stems) names a code name: 1.0 verbatim (a
    dotted name also by its last part, alone or under a compatible qualifier), 0.5 when only
    the words of the name occur as written, on their own rather than inside other names,
    else 0."""
    text = where.lower()
    wanted = name.lower()
    if re.search(rf"(?<![\w.]){re.escape(wanted)}(?!\w)", text) or named_by_tail(name, where):
        return 1.0
    tail = name.rsplit(".", 1)[-1]
    words = _WORD.findall(tail)
    found = all(says_word(where, w) and stem(w.lower()) not in loose for w in words)
    return 0.5 if words and found else 0.0


def named_by_tail(name: str, where: str) -> bool:
    """Whether ``where`` names the dotted ``name`` by its last part, in its own case
    (``typing.Self`` is not any "self"), alone or under a qualifier that agrees with the
    name's (``Path.mkdir`` for ``pathlib.Path.mkdir``): ``multiprocessing.cpu_count`` is
    another function than ``os.cpu_count``."""
    qualifier, _, tail = name.rpartition(".")
    if not qualifier:
        return False
    own = qualifier.lower().split(".")
    for match in re.finditer(rf"(?<![\w.])((?:[A-Za-z_]\w*\.)*){re.escape(tail)}(?!\w)", where):
        theirs = match[1].lower().rstrip(".").split(".") if match[1] else []
        shorter = min(len(own), len(theirs))
        if own[len(own) - shorter :] == theirs[len(theirs) - shorter :]:
            return True
    return False


_WORD = re.compile(r"[^\W_]+")


def split_chunks(chunks: Sequence[Chunk], *, with_signatures: bool = False) -> list[Sentence]:
    """Every unit of the chunks (:func:`~ragloop.core.text.passage_units`), headings
    and fragments without content words left out. ``with_signatures`` (for a question about a
    default value): an API signature with default values that heads a chunk
    (``Fraction.limit_denominator(max_denominator=1000000)``) is a unit too, once."""
    out: list[Sentence] = []
    signatures: set[str] = set()
    for index, chunk in enumerate(chunks):
        base = chunk_context(chunk)
        title = str(chunk.metadata.get("title") or "").strip()
        path = [str(h).replace("¶", "").strip() for h in chunk.metadata.get("heading_path") or []]
        base_stems = frozenset(content_stems(base))
        units = passage_units(chunk.content)
        if (
            with_signatures
            and path
            and is_signature(path[-1])
            and "=" in path[-1]
            and path[-1] not in signatures
        ):
            signatures.add(path[-1])
            units = [PassageUnit("signature", path[-1]), *units]
        previous_heading = None
        for position, unit in enumerate(units):
            lead = unit.heading != previous_heading  # the first unit under its heading
            previous_heading = unit.heading
            text = unit.text.strip()
            if (text.startswith("#") and unit.kind == "prose") or len(text) > MAX_SENTENCE_CHARS:
                continue
            stems = frozenset(content_stems(text))
            if not stems:
                continue
            context, context_stems = base, base_stems
            if unit.heading:
                context = f"{base} {unit.heading}"
                context_stems = base_stems | content_stems(unit.heading)
            heading = unit.heading or (path[-1] if path and unit.kind != "signature" else "")
            if heading == title:
                heading = ""  # the page's own name says nothing more about one sentence
            out.append(
                Sentence(
                    text,
                    index,
                    position,
                    context,
                    stems,
                    context_stems,
                    kind=unit.kind,
                    heading=heading,
                    title=title,
                    lead=lead,
                    loose_stems=frozenset(loose_stems(text)),
                )
            )
    return out


_SIGNATURE = re.compile(
    r"^(?:(?:class|exception|async|await|abstractmethod|classmethod|staticmethod) )*"
    r"@?[A-Za-z_][\w.]*\s*(?:\(.*\)|\[.*\])?(?:\s*[;,]\s*@?[A-Za-z_][\w.]*\s*\(.*\))*$"
)


def is_signature(heading: str) -> bool:
    """Whether a heading is an API signature (``json.dumps(obj, *, indent=None)``,
    ``pickle.DEFAULT_PROTOCOL``) rather than words."""
    return bool(_SIGNATURE.match(heading.strip())) and bool(code_names(heading))


def section_name(sentence: Sentence, asked: QuestionProfile, *, naming: str | None = None) -> str:
    """The name of what a sentence is about, to quote it by: its heading, else its page's
    title (with ``naming``, an answer type of :data:`HEADING_NAMED`: the first of them that
    gives one, such as the name of some code); a long signature is cut to its name and the
    parameters the question ``asked`` names (``json.dumps(...)``,
    ``json.dumps(..., indent=None, ...)``: their defaults may be the
    answer)."""
    names = [n for n in (sentence.heading, sentence.title) if n]
    if naming:
        names = [n for n in names if gives_answer_type(naming, n)]
    name = names[0] if names else ""
    if len(name) > 60 and "(" in name:
        return shortened_signature(name, asked)
    return name


def shortened_signature(signature: str, asked: QuestionProfile) -> str:
    """``signature`` as its name and, of its (first) parameter list, the parameters whose
    name the question ``asked`` gives, each with its default; ``...`` for the others."""
    head, _, rest = signature.partition("(")
    params = parameters(rest)
    wanted = named_parameters(asked)
    kept = [i for i, p in enumerate(params) if parameter_name(p).lower() in wanted]
    if not kept:
        return f"{head}(...)"
    shown = [params[i] for i in kept]
    if kept[0] > 0:
        shown.insert(0, "...")
    if kept[-1] < len(params) - 1:
        shown.append("...")
    return f"{head}({', '.join(shown)})"


def named_parameters(asked: QuestionProfile) -> set[str]:
    """The names a parameter the question asks about may have: its code names (the last part
    of a dotted one) and its other terms (not ``url``, a word of ``open_url``)."""
    names = {n.rpartition(".")[2].lower() for n in asked.identifiers}
    pieces = {t for n in asked.identifiers for t in re.split(r"[\W_]+", n.lower())}
    return names | {t.lower() for t in asked.terms if t.lower() not in pieces}


def parameter_name(parameter: str) -> str:
    """``indent`` of ``indent=None``, ``args`` of ``*args``."""
    return re.split(r"[=:\[]", parameter, maxsplit=1)[0].strip().lstrip("*").strip()


def parameters(text: str) -> list[str]:
    """The parameters of the list ``text`` continues (what follows its opening bracket): split
    at the commas outside brackets and quotes, up to the bracket that closes it."""
    parts: list[str] = []
    depth, quote, start = 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:  # the list's own closing bracket
                text = text[:i]
                break
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


@dataclass
class SentenceScorer:
    """Scores sentences for one question (see the module docstring)."""

    question: QuestionProfile
    sentences: list[Sentence]
    weights: dict[str, float] = field(default_factory=dict)  # stem -> importance
    compound_stems: frozenset[str] = frozenset()  # stems of the question's own compound names
    # stem -> a word the question says only inside its code names, matched only as written
    code_words: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, question: str | QuestionProfile, sentences: list[Sentence]) -> SentenceScorer:
        asked = profile(question) if isinstance(question, str) else question
        n = max(len(sentences), 1)
        names = {stem(t) for e in [*asked.entities, *asked.identifiers] for t in tokenize(e)}
        focus = {stem(t) for t in asked.focus}
        weights: dict[str, float] = {}
        for term in asked.stems:
            df = sum(1 for s in sentences if term in s.stems or term in s.context_stems)
            idf = math.log(1 + n / (1 + df))
            weights[term] = idf * (1.5 if term in names else 1.0) * (2.0 if term in focus else 1.0)
        compounds = frozenset(
            stem(t) for name in asked.identifiers if "_" in name for t in tokenize(name)
        )
        return cls(asked, sentences, weights, compounds, question_code_words(asked))

    def as_written(self, stems: frozenset[str] | set[str], text: str) -> frozenset[str]:
        """The question's terms ``text`` (with its ``stems``) says: ``stems`` without the
        question's code words that ``text`` does not say as written (``typing`` in
        ``typing.Self`` is not the ``type`` of ``type(obj)``), and with the terms the question
        negates that ``text`` says with a negative prefix ("cannot be determined":
        "undetermined")."""
        absent = {s for s, word in self.code_words.items() if not says_word(text, word)}
        return (frozenset(stems) - absent) | self.negated_in(text)

    def negated_in(self, text: str) -> frozenset[str]:
        """The stems of the question's negated terms that ``text`` says as one word with a
        negative prefix ("undetermined" for "cannot be determined")."""
        if not self.question.negated:
            return frozenset()
        wanted = {stem(t) for t in self.question.negated}
        unprefixed = (
            stem(word[len(prefix) :])
            for word in tokenize(text)
            for prefix in NEGATIVE_PREFIXES
            if word.startswith(prefix)
        )
        return frozenset(s for s in unprefixed if s in wanted)

    def coverage(
        self,
        stems: frozenset[str] | set[str],
        context: frozenset[str] = frozenset(),
        context_weight: float = CONTEXT_WEIGHT,
        soft: frozenset[str] | set[str] = frozenset(),
        loose: frozenset[str] | set[str] = frozenset(),
        ignore: frozenset[str] | set[str] = frozenset(),
    ) -> float:
        """The weighted share of the question's terms in ``stems``; a term found only in
        ``context`` (titles, headings) counts ``context_weight``, one said in other words
        (``soft``) ``SOFT_WEIGHT``, one found only inside a longer compound name (``loose``:
        ``strict`` in ``strict_timestamps``, unless the question has that compound)
        ``LOOSE_WEIGHT``; terms in ``ignore`` do not count either way."""
        weights = {t: w for t, w in self.weights.items() if t not in ignore}
        total = sum(weights.values())
        if total <= 0:
            return 0.0
        got = 0.0
        for term, weight in weights.items():
            if term in loose and term not in self.compound_stems:
                got += weight * LOOSE_WEIGHT
            elif term in stems:
                got += weight
            elif term in context:
                got += weight * context_weight
            elif term in soft:
                got += weight * SOFT_WEIGHT
        return got / total

    def names_share(self, sentence: Sentence) -> float:
        """The share of the question's names (entities and code names) the sentence gives."""
        entities, code = self.question.entities, self.question.identifiers
        if not entities and not code:
            return 0.0
        found = float(sum(sentence.has_name(e) for e in entities if e not in code))
        found += sum(sentence.names_code(c) for c in code)
        return found / len([e for e in entities if e not in code] + list(code))

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

    def features(
        self, sentence: Sentence, chunks: Sequence[Chunk], similarity: float | None
    ) -> dict[str, float]:
        """The features of :data:`SENTENCE_FEATURES` for one sentence."""
        asked = self.question
        typed = asked.answer_type not in (None, "yesno")
        said = sentence.text
        if asked.answer_type in HEADING_NAMED:  # often named only by its section
            said = f"{sentence.heading or sentence.title}: {said}"
        gives = typed and gives_answer_type(asked.answer_type, said, asked.text)
        return {
            "lexical": self.coverage(
                self.as_written(sentence.stems, sentence.text),
                self.as_written(sentence.context_stems, sentence.context),
                soft=sentence.soft_stems - self.code_words.keys(),
                loose=sentence.loose_stems,
            ),
            "names": self.names_share(sentence),
            "type": float(gives),
            "untyped": float(typed and not gives),
            "similarity": max(similarity, 0.0) if similarity is not None else 0.0,
            "prior": chunks[sentence.chunk].score / (1 + 0.1 * sentence.chunk),
            "lead": float(sentence.lead),
        }

    def _score(self, chunks: Sequence[Chunk], similarity: Sequence[float] | None) -> list[Sentence]:
        coefficients = SENTENCE_COEFFICIENTS if similarity is not None else SENTENCE_LEXICAL
        for i, sentence in enumerate(self.sentences):
            sim = float(similarity[i]) if similarity is not None else None
            sentence.features = self.features(sentence, chunks, sim)
            sentence.score = logistic(coefficients, sentence.features)
            if sentence.kind in ("code", "signature"):  # it shows an answer; prose states it
                sentence.score *= CODE_FACTOR
        return sorted(self.sentences, key=lambda s: (-s.score, s.chunk, s.position))


def question_code_words(asked: QuestionProfile) -> dict[str, str]:
    """The words the question says only inside its code names, by stem, as written: a code
    name is not inflected and keeps its case, so only the same word names it."""
    prose = asked.text
    for name in asked.identifiers:
        prose = prose.replace(name, " ")
    said = content_stems(prose)
    return {
        stem(word.lower()): word
        for name in asked.identifiers
        for word in _WORD.findall(name)
        if stem(word.lower()) in asked.stems and stem(word.lower()) not in said
    }


def logistic(coefficients: dict[str, float], features: dict[str, float]) -> float:
    """``1 / (1 + exp(-z))`` with ``z = coefficients["bias"] + sum(w * feature)``."""
    z = coefficients.get("bias", 0.0) + sum(
        w * features.get(name, 0.0) for name, w in coefficients.items() if name != "bias"
    )
    return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))


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
    sims = corpus.similarity(scorer.question.text, [embedded_text(s) for s in chosen])
    if sims is None:
        return None
    by_sentence = {id(s): float(x) for s, x in zip(chosen, sims, strict=True)}
    floor = min(by_sentence.values())
    return [by_sentence.get(id(s), floor) for s in sentences]


def embedded_text(sentence: Sentence) -> str:
    """What is embedded for a sentence: the heading it sits under (else its document's
    title), then the sentence, since a passage often names its subject only there ("New in
    version 3.11." under ``contextlib.chdir(path)``, "It weighs 1.6 kg" in "Skylark 2")."""
    label = sentence.heading or sentence.title
    return f"{label}: {sentence.text}" if label else sentence.text

"""Which scored sentences make an answer: the best one, one per part of a multi-part question,
continuations and bridges, and the document a pointer names (see :func:`select`). The scores
come from :class:`~ragloop.components.heuristics.extractive.SentenceScorer`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from ragloop.components.heuristics.corpus import Corpus
from ragloop.components.heuristics.extractive import (
    VALUE_TYPES,
    Sentence,
    SentenceScorer,
    sentence_similarity,
    split_chunks,
)
from ragloop.components.heuristics.questions import (
    QuestionProfile,
    answer_is_subject,
    profile,
    refers_back,
)
from ragloop.core.records import Chunk
from ragloop.core.text import code_names, content_terms, entity_phrases, tokenize

CONTINUATION_GAP = 2.0  # log-odds below the best sentence a continuation may score ...
BRIDGE_GAP = 3.5  # ... and one that follows a name the chosen sentences introduce
MIN_GAIN = 0.2  # share of the question's weight a further sentence must add
TYPED_GAP = 2.0  # log-odds below the best a sentence giving the value asked for may score
POINTER_SHARE = 0.3  # share of a sentence's new words a name must make up to be a pointer


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
    scorer: SentenceScorer,
    ranked: list[Sentence],
    *,
    max_sentences: int = 3,
    parts: Sequence[list[Sentence]] = (),
) -> list[Sentence]:
    """The sentences of an answer: the best one, or for a multi-part question the best one for
    each part (``parts``: the sentences ranked for each part on its own, see
    :func:`rank_for_parts`); then sentences that add uncovered question terms and continue
    what was chosen; then, for a sentence that only points to another document, that
    document's best sentence. At most ``max_sentences``. A sentence that shares no term with
    the question is never the answer: when one scores best ("New in version 3.3." of another
    class), the answer starts from the best that does, if the question asks for a kind of
    value (a version, ...) that it gives and it scores within ``CONTINUATION_GAP`` log-odds."""
    relevant = [s for s in ranked if _relevant(s, scorer.question.stems)]
    if not relevant:
        return []
    if relevant[0] is not ranked[0] and (
        not relevant[0].features.get("type")
        or _logit(relevant[0].score) < _logit(ranked[0].score) - CONTINUATION_GAP
    ):
        return []
    by_key = {(s.chunk, s.position): s for s in ranked}
    chosen: list[Sentence] = []
    for ranking in parts:
        best = _best_for_part(ranking, scorer.question.stems, chosen, by_key)
        if best is not None and len(chosen) < max_sentences:
            sentence = by_key[(best.chunk, best.position)]
            if sentence not in chosen:
                chosen.append(sentence)
    if not chosen:
        chosen = [_best_typed(scorer, relevant)]
    _add_next_for_type(scorer, ranked, chosen, max_sentences)
    _add_continuations(scorer, ranked, chosen, max_sentences)
    _follow_pointers(scorer, ranked, chosen, max_sentences)
    return chosen


def _best_for_part(
    ranking: list[Sentence],
    asked: frozenset[str],
    chosen: list[Sentence],
    by_key: dict[tuple[int, int], Sentence],
) -> Sentence | None:
    """A part's best sentence; when an earlier part already took it, the part's best other one
    that gives the kind of value the part asks for (an exception, a version, ...), if it scores
    within ``CONTINUATION_GAP`` log-odds: such a part asks for a value of its own ("..., and
    which class does it derive from?")."""
    candidates = [s for s in ranking if _relevant(s, asked)]
    if not candidates or by_key[(candidates[0].chunk, candidates[0].position)] not in chosen:
        return candidates[0] if candidates else None
    floor = _logit(candidates[0].score) - CONTINUATION_GAP
    for sentence in candidates[1:]:
        if _logit(sentence.score) < floor:
            break
        if (
            sentence.features.get("type")
            and by_key[(sentence.chunk, sentence.position)] not in chosen
        ):
            return sentence
    return candidates[0]


def _best_typed(scorer: SentenceScorer, ranked: list[Sentence]) -> Sentence:
    """The best sentence, or, when the question asks for a value (a weight, a version, an
    exception's name, ...) that the best one lacks, the best one that gives it, if it scores
    within ``TYPED_GAP`` log-odds: "It weighs 7.9 kg" under "Bothy 4", not "The Bothy 4 costs
    £449", for "How heavy is the Bothy 4?"."""
    best = ranked[0]
    if scorer.question.answer_type not in VALUE_TYPES or best.features.get("type"):
        return best
    floor = _logit(best.score) - TYPED_GAP
    for sentence in ranked[1:]:
        if _logit(sentence.score) < floor:
            break
        if sentence.features.get("type") and _relevant(sentence, scorer.question.stems):
            return sentence
    return best


def _relevant(sentence: Sentence, asked: frozenset[str]) -> bool:
    """A sentence worth quoting at all: it shares a term with the question (in its words, its
    headings, or said in other words)."""
    return sentence.score > 0 and bool(
        (sentence.stems | sentence.context_stems | sentence.soft_stems) & asked
    )


def rank_for_parts(
    question: QuestionProfile,
    sentences: list[Sentence],
    chunks: Sequence[Chunk],
    corpus: Corpus | None,
) -> list[list[Sentence]]:
    """For a multi-part question, the sentences ranked for each part as if it were asked
    alone (copies: the sentences themselves keep their scores for the whole question). When
    the first part asks for its subject ("What exception is raised when ...") a later part's
    "it" is that answer, read as the name the first part's best sentence gives ("..., and
    which class does it derive from (KeyError)")."""
    if not question.is_multi_part:
        return []
    rankings: list[list[Sentence]] = []
    for part in question.parts:
        if rankings and answer_is_subject(question.parts[0]) and refers_back(part):
            first = next((s for s in rankings[0] if _relevant(s, question.stems)), None)
            names = code_names(first.heading) or code_names(first.text) if first else []
            if names:
                part = f"{part.rstrip('?')} ({names[0]})"
        copies = [replace(s, soft_stems=frozenset(), features={}) for s in sentences]
        scorer = SentenceScorer.build(profile(part), copies)
        rankings.append(scorer.score(chunks, sentence_similarity(corpus, scorer, chunks), corpus))
    return rankings


def _covered(chosen: list[Sentence]) -> set[str]:
    return set().union(*(s.stems | s.context_stems | s.soft_stems for s in chosen))


def _add_next_for_type(
    scorer: SentenceScorer, ranked: list[Sentence], chosen: list[Sentence], limit: int
) -> None:
    """When the chosen sentences lack the kind of answer asked for, the sentence right after
    the first one, if it gives it: documentation often names a thing in one sentence and gives
    its value in the next ("An integer, the default protocol version." "The default is 4.")."""
    if len(chosen) >= limit or not any(s.features.get("untyped") for s in chosen[:1]):
        return
    if any(s.features.get("type") for s in chosen):
        return
    first = chosen[0]
    following = next(
        (s for s in ranked if s.chunk == first.chunk and s.position == first.position + 1), None
    )
    if following is not None and following.features.get("type") and following not in chosen:
        chosen.insert(1, following)


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return math.log(p / (1 - p))


def _add_continuations(
    scorer: SentenceScorer, ranked: list[Sentence], chosen: list[Sentence], limit: int
) -> None:
    """Sentences that add uncovered question terms and continue what was chosen: the same
    chunk, one of the question's names (said whole, in the sentence or its headings), or a
    name a chosen sentence introduced (a bridge)."""
    total = sum(scorer.weights.values()) or 1.0
    top = _logit(chosen[0].score)
    while len(chosen) < limit:
        missing = set(scorer.weights) - _covered(chosen)
        bridges = [n for s in chosen for n in new_names(s, scorer.question)]
        floor = top - (BRIDGE_GAP if bridges else CONTINUATION_GAP)
        best_gain, best = 0.0, None
        for s in ranked:
            if s in chosen or _logit(s.score) < floor:
                continue
            gain = sum(
                scorer.weights[t] for t in missing & (s.stems | s.context_stems | s.soft_stems)
            )
            linked = any(s.has_name(n) for n in bridges) and s.chunk != chosen[0].chunk
            related = (
                linked
                or any(s.chunk == c.chunk for c in chosen)
                or any(s.says_name(e) for e in scorer.question.entities)
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
            if there:  # its sentence with most of the question's words, then the best
                asked = scorer.question.stems
                chosen.append(max(there, key=lambda s: (len(s.stems & asked), s.score)))


def closest_units(
    question: str, chunks: Sequence[Chunk], corpus: Corpus | None, *, limit: int, chars: int
) -> list[tuple[Chunk, Sentence, str]]:
    """The chunks that come closest to answering ``question``, best first, at most ``limit``:
    each chunk's best sentence (scored as the extractive answer scores them), with the chunk's
    text from that sentence on, cut to about ``chars`` characters at a sentence's end."""
    sentences = split_chunks(chunks)
    if not sentences:
        return []
    scorer = SentenceScorer.build(question, sentences)
    ranked = scorer.score(chunks, sentence_similarity(corpus, scorer, chunks), corpus)
    best: dict[int, Sentence] = {}
    for sentence in ranked:
        best.setdefault(sentence.chunk, sentence)
    picked = sorted(best.values(), key=lambda s: (-s.score, s.chunk))[:limit]
    return [(chunks[s.chunk], s, _from_sentence_on(chunks[s.chunk], s, chars)) for s in picked]


def _from_sentence_on(chunk: Chunk, sentence: Sentence, chars: int) -> str:
    """The chunk's text from ``sentence`` on, at most about ``chars`` characters, cut after
    the last whole sentence that fits (the sentence itself always)."""
    text = " ".join(chunk.content.split())
    said = " ".join(sentence.text.split())
    start = text.find(said)
    if start < 0:
        return said if len(said) <= chars else said[: chars - 1].rstrip() + "…"
    rest = text[start:]
    if len(rest) <= chars:
        return rest
    cut = max(rest.rfind(". ", len(said), chars), rest.rfind("? ", len(said), chars))
    return rest[: cut + 1] if cut > 0 else rest[:chars].rstrip() + "…"

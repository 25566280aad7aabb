"""Evaluators: is the answer grounded in the chunks, and complete for the question?

:class:`LLMEvaluator` asks a model (ragsnag's, with tolerant parsing); :class:`HeuristicEvaluator`
needs none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, field_validator

from ragloop.components.corpus import Corpus, chunk_context, chunk_text
from ragloop.components.extractive import (
    STAND_INS,
    SentenceScorer,
    pointer_names,
    soft_matches,
    split_chunks,
)
from ragloop.components.fitting import ask_fitted, cut_text, fit_chunk_prompt
from ragloop.components.generators import NO_ANSWER, strip_citations
from ragloop.components.grounding import LexicalGrounder
from ragloop.components.prompts import evaluator_prompt, fence_chunk
from ragloop.components.questions import QuestionProfile, gives_answer_type, profile
from ragloop.components.text import (
    content_stems,
    entity_phrases,
    sentence_units,
    stem,
    tokenize,
)
from ragloop.core.calls import GenerateFn, resolve_llm, run_sync
from ragloop.core.jsonparse import LenientBool, ParseFailure, UnitScore, parse_llm_json
from ragloop.core.limits import PromptFit, check_max_tokens
from ragloop.core.protocols import ChatModel
from ragloop.core.rag_records import EvaluationResult
from ragloop.core.records import Chunk

UNPARSEABLE_PREFIX = "Evaluator returned unparseable response"


class _EvaluationReply(BaseModel):
    is_grounded: LenientBool
    is_complete: LenientBool
    score: UnitScore
    reason: str = ""

    @field_validator("reason", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return "" if value is None else str(value)


class LLMEvaluator:
    """Asks an LLM whether the answer is grounded in the chunks and complete.

    ``generate_fn`` is a function of the prompt (called with the prompt as its only positional
    argument, sync or async) that returns the reply text, or a :class:`~ragloop.ChatModel`; a
    callable is always called as a function, so ``MagicMock(return_value=reply)`` works as in
    ragsnag's tests. ``model=`` names a chat model explicitly (the rule:
    :func:`ragloop.core.calls.resolve_llm`).
    The reply is read tolerantly (code fences, prose around the JSON, ``"false"``, scores out of
    range, ...). A reply that still cannot be read gives score 0.0, ``is_grounded=False``,
    ``parse_failed=True`` and the reply itself in ``reason``, and the loop goes on.

    The reply is bounded by ``max_tokens`` (default 256, ``DEFAULT_MAX_TOKENS["evaluator"]``);
    a verdict cut by it counts if its score and booleans came before the cut. The prompt fits
    the model's context window: the answer keeps at most a third of the room, the chunks are
    kept in rank order and the lowest-ranked ones left out.
    """

    def __init__(
        self,
        generate_fn: GenerateFn | ChatModel | None = None,
        *,
        model: ChatModel | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.generate_fn = resolve_llm(generate_fn, model, owner="LLMEvaluator")
        self.max_tokens = check_max_tokens(max_tokens)

    async def aevaluate(self, query: str, chunks: list[Chunk], answer: str) -> EvaluationResult:
        def build(room: int | None) -> tuple[str, PromptFit]:
            shown = answer if room is None else cut_text(answer, max(room // 3, 1))
            prompt, fit = fit_chunk_prompt(
                chunks,
                room,
                fence_chunk,
                lambda kept, left: evaluator_prompt(query, kept, shown, omitted=left),
            )
            if shown == answer:
                return prompt, fit
            notes = ["the answer was cut to a third of the prompt's room", *fit.notes]
            return prompt, fit.model_copy(update={"notes": notes})

        response = await ask_fitted(
            self.generate_fn, build, role="evaluator", max_tokens=self.max_tokens
        )
        reply = response.text
        parsed = parse_llm_json(reply, _EvaluationReply, cut=response.truncated)
        if isinstance(parsed, ParseFailure):
            return EvaluationResult(
                is_grounded=False,
                is_complete=False,
                score=0.0,
                reason=f"{UNPARSEABLE_PREFIX} ({parsed.reason}): {parsed.excerpt()}",
                parse_failed=True,
            )
        value = parsed.value
        return EvaluationResult(
            is_grounded=value.is_grounded,
            is_complete=value.is_complete,
            score=value.score,
            reason=value.reason,
        )

    def evaluate(self, query: str, chunks: list[Chunk], answer: str) -> EvaluationResult:
        return run_sync(lambda: self.aevaluate(query, chunks, answer))


# -- the heuristic evaluator --------------------------------------------------------------------

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")
_CONCEPTUAL = re.compile(r"^\s*(?:how (?:does|do|did|can)\b|explain|describe|what makes)\b", re.I)
SUPPORT_SIMILARITY = 0.85  # embedding cosine at which a paraphrase counts as supported
COMPLETE_COVERAGE = 0.75  # weighted share of the question's terms a complete answer covers


@dataclass
class Analysis:
    """What :class:`HeuristicEvaluator` found, before it becomes a verdict."""

    missing: list[str] = field(default_factory=list)  # question terms no chunk contains
    foreign: list[str] = field(default_factory=list)  # ... that the corpus never uses
    stand_ins: dict[str, list[str]] = field(default_factory=dict)  # foreign term -> corpus words
    read_as: dict[str, list[str]] = field(default_factory=dict)  # ... of which the answer uses
    evidence_coverage: float = 0.0
    answered: bool = False
    answer_coverage: float = 0.0
    grounded_share: float = 0.0
    unsupported: list[str] = field(default_factory=list)
    uncovered_parts: list[tuple[int, str]] = field(default_factory=list)
    type_found: bool = True
    focus_missing: list[str] = field(default_factory=list)  # the asked-for thing, not answered
    hops: list[str] = field(default_factory=list)  # names the answer points to, not retrieved
    bridges: list[str] = field(default_factory=list)  # names the chunks point to, not retrieved
    named: list[str] = field(default_factory=list)  # names the answer brings in

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


def _quoted(terms: list[str], limit: int = 3) -> str:
    shown = ", ".join(f"'{t}'" for t in terms[:limit])
    return shown + (f" and {len(terms) - limit} more" if len(terms) > limit else "")


class HeuristicEvaluator:
    """Judges an answer without an LLM: grounded, complete, a score, and a reason worded for
    the strategy picker (see ``docs/offline.md``).

    - **grounded**: every answer sentence is supported by the chunks, lexically
      (:class:`~ragloop.LexicalGrounder`) or, with an embedder, by a chunk sentence whose
      embedding is close (for generators that paraphrase);
    - **complete**: the chunks and the answer cover the question's terms and names (a word the
      knowledge base never uses is covered by the corpus words that stand for it), every part
      of a multi-part question and the kind of answer asked for, and the answer does not just
      point at a document that was not retrieved (a second hop);
    - **score** in [0, 1]: coverage, grounding, parts and answer type, scaled down when
      incomplete (x0.75) or ungrounded (x0.85), so that only a grounded, complete answer
      reaches the usual 0.8 threshold;
    - **reason**: the most useful problem, worded for :class:`~ragloop.HeuristicReformulator`'s
      keyword table ("no chunk mentions 'rent'": perspective shift; "multi-part question" and
      "missing second hop": decompose; "incomplete", "partial", "too generic": narrow;
      "unrelated", "no relevant": step back; "explain": hyde; anything else: expand).

    ``corpus`` (a :class:`~ragloop.KnowledgeBase`, a retriever or a ``Corpus``) lets it check
    which words the documents use at all, follow the link graph and use the embedder.
    """

    def __init__(self, *, corpus: object = None, grounder: LexicalGrounder | None = None) -> None:
        self.corpus = None if corpus is None else Corpus.of(corpus)
        self.grounder = grounder or LexicalGrounder()

    def evaluate(self, query: str, chunks: list[Chunk], answer: str) -> EvaluationResult:
        return self.judge(query, chunks, answer)[0]

    def judge(
        self, query: str, chunks: list[Chunk], answer: str
    ) -> tuple[EvaluationResult, Analysis]:
        """The verdict and the analysis behind it (what the offline controller plans from)."""
        asked = profile(query)
        if not chunks:
            verdict = EvaluationResult(
                is_grounded=False,
                is_complete=False,
                score=0.0,
                reason=f"nothing found: no chunk was retrieved for {_quoted(asked.terms)}",
            )
            return verdict, Analysis()
        found = self.analyse(asked, chunks, answer)
        grounded = found.answered and found.grounded_share >= 1.0
        parts = 1.0 - len(found.uncovered_parts) / max(len(asked.parts), 1)
        score = (
            0.35 * found.answer_coverage
            + 0.15 * found.evidence_coverage
            + 0.2 * found.grounded_share
            + 0.15 * float(found.type_found)
            + 0.15 * parts
        )
        if not found.complete:
            score *= 0.75
        if not grounded:
            score *= 0.85
        verdict = EvaluationResult(
            is_grounded=grounded,
            is_complete=found.complete,
            score=round(min(max(score, 0.0), 1.0), 4),
            reason=self.reason(asked, found),
        )
        return verdict, found

    # -- analysis -------------------------------------------------------------------------------
    def analyse(self, asked: QuestionProfile, chunks: list[Chunk], answer: str) -> Analysis:
        """Coverage, grounding, parts, answer type and hops of ``answer`` (see the class)."""
        found = Analysis()
        scorer = SentenceScorer.build(asked, split_chunks(chunks))
        self._check_evidence(asked, chunks, scorer, found)
        text = strip_citations(answer)
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
        evidence = set().union(*(content_stems(chunk_text(c)) for c in chunks))
        found.missing = [t for t in asked.terms if stem(t) not in evidence]
        if self.corpus is not None:
            # a word the documents never use needs corpus words standing for it ...
            found.foreign = [t for t in found.missing if not self.corpus.mentions(t)]
            for term in found.foreign:
                words = self.corpus.substitutes(term, asked.text, limit=STAND_INS)
                present = [w for w in words if stem(w) in evidence]
                if present:
                    found.stand_ins[term] = present
            # ... one they do use may be said in other words in the best chunks
            others = [t for t in found.missing if t not in found.foreign]
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
        backing = self._ground(text, chunks, found)
        context = frozenset().union(*(content_stems(chunk_context(c)) for c in backing))
        said = content_stems(text)
        for term, words in found.stand_ins.items():
            used = [w for w in words if stem(w) in said | context]
            if used:
                found.read_as[term] = used
        said |= {stem(t) for t in found.read_as}
        soft = (
            set().union(*soft_matches(self.corpus, asked.terms, [text])) if self.corpus else set()
        )
        found.answer_coverage = scorer.coverage(said, context, context_weight=1.0, soft=soft)
        found.focus_missing = [t for t in asked.focus if stem(t) not in said | context | soft]
        weights = set(scorer.weights)
        for i, part in enumerate(asked.parts if asked.is_multi_part else []):
            wanted = content_stems(part) & weights
            if wanted and len(wanted & (said | context)) * 2 < len(wanted):
                found.uncovered_parts.append((i, part))
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

    def _ground(self, text: str, chunks: list[Chunk], found: Analysis) -> list[Chunk]:
        """Set the grounded share and unsupported sentences; return the chunks the answer
        rests on (its sentences' best sources)."""
        grounding = self.grounder.ground(text, chunks)
        by_id = {c.id: c for c in chunks}
        backing = [
            by_id[span.sources[0].chunk_id]
            for span in grounding.faithful_spans
            if span.sources and span.sources[0].chunk_id in by_id
        ]
        claims = len(grounding.faithful_spans) + len(grounding.hallucinated_spans)
        supported = len(grounding.faithful_spans)
        for span in grounding.hallucinated_spans:
            source = self._paraphrased(span.text, chunks)
            if source is not None:
                supported += 1
                backing.append(source)
            else:
                found.unsupported.append(span.text)
        found.grounded_share = supported / claims if claims else 0.0
        return list({c.id: c for c in backing}.values())

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
        pointers = {n for sentence in sentences for n in pointer_names(sentence, asked)}
        hops = [
            str(target.metadata.get("mention"))
            for target in self.corpus.linked(backing)
            if target.source not in retrieved and target.metadata.get("mention") in pointers
        ]
        return list(dict.fromkeys(hops))

    # -- the reason -----------------------------------------------------------------------------
    def reason(self, asked: QuestionProfile, found: Analysis) -> str:
        """The most useful thing to fix, in the strategy picker's vocabulary."""
        unresolved = found.unresolved
        foreign = [t for t in unresolved if t in found.foreign]
        if found.hops:
            return f"missing second hop: the answer points to '{found.hops[0]}', not searched yet"
        if found.uncovered_parts:
            index, part = found.uncovered_parts[0]
            ordinal = _ORDINALS[min(index, len(_ORDINALS) - 1)]
            return f"multi-part question: {ordinal} part '{part.rstrip('?')}' not covered"
        if foreign or (unresolved and self.corpus is None):
            terms = foreign or unresolved
            return (
                f"no chunk mentions {_quoted(terms)}: the documents may use different terminology"
            )
        wanted = found.focus_missing or unresolved
        if wanted and found.named:
            return (
                f"missing second hop: {_quoted(wanted)} not found for '{found.named[0]}', "
                "which the answer names"
            )
        if unresolved and found.bridges:
            return (
                f"missing second hop: {_quoted(unresolved)} may be in '{found.bridges[0]}', "
                "which these chunks name"
            )
        if unresolved and found.evidence_coverage < 0.25:
            return "the retrieved chunks are unrelated to the question"
        if unresolved:
            return f"the retrieved chunks lack {_quoted(unresolved)}, which other documents use"
        if not found.answered:
            return "no relevant sentence in the chunks answers the question"
        if not found.type_found:
            if _CONCEPTUAL.search(asked.text):
                return "conceptual question: explain the mechanism the question asks about"
            kind = asked.answer_type or "answer"
            return f"incomplete: no sentence gives the {kind} the question asks for"
        if found.focus_missing:
            return (
                f"incomplete: the answer does not give the {_quoted(found.focus_missing)} asked for"
            )
        if found.unsupported:
            return f"partial support: '{found.unsupported[0][:80]}' is not in the chunks"
        if found.answer_coverage < COMPLETE_COVERAGE:
            return (
                f"answer too generic: it covers {found.answer_coverage:.0%} of the question's terms"
            )
        stand_ins = "; ".join(f"'{t}' read as '{w[0]}'" for t, w in found.read_as.items())
        done = "grounded and complete: the answer covers every term and part of the question"
        return f"{done} ({stand_ins})" if stand_ins else done

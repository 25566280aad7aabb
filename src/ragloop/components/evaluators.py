"""Evaluators: is the answer grounded in the chunks, and complete for the question?

:class:`LLMEvaluator` asks a model (ragsnag's, with tolerant parsing); :class:`HeuristicEvaluator`
needs none.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, field_validator

from ragloop.components.grounding import LexicalGrounder
from ragloop.components.heuristics.judging import (
    COMPLETE_COVERAGE,
    Analysis,
    AnswerJudge,
    answer_probability,
)
from ragloop.components.heuristics.questions import QuestionProfile, is_generic, profile
from ragloop.components.heuristics.selection import closest_units
from ragloop.components.llm.fitting import ask_fitted, cut_text, fit_chunk_prompt
from ragloop.components.llm.prompts import evaluator_prompt, fence_chunk
from ragloop.core.calls import GenerateFn, resolve_llm, run_sync
from ragloop.core.jsonparse import LenientBool, ParseFailure, UnitScore, parse_llm_json
from ragloop.core.limits import PromptFit, check_max_tokens
from ragloop.core.protocols import ChatModel
from ragloop.core.records import Chunk
from ragloop.core.records.gaps import CLOSEST_CHARS, QUOTE_CHARS, EvidenceGaps, GapPart, NearMiss
from ragloop.core.records.rag import EvaluationResult
from ragloop.core.text import content_stems, stem

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
_PASSAGE_LEAD = re.compile(r"^.*?closest passage[^:]*:\s*", re.I)
_CONCEPTUAL = re.compile(r"^\s*(?:how (?:does|do|did|can)\b|explain|describe|what makes)\b", re.I)


def _quoted(terms: list[str], limit: int = 3) -> str:
    shown = ", ".join(f"'{t}'" for t in terms[:limit])
    return shown + (f" and {len(terms) - limit} more" if len(terms) > limit else "")


def _unsaid(foreign: list[str], part: str, claim: str, stand_ins: dict[str, list[str]]) -> bool:
    """Whether ``part`` asks about a word the documents never use that ``claim`` does not say,
    neither as it is nor in one of the corpus words that stand for it."""
    asked = content_stems(part)
    said = content_stems(claim)
    return any(
        stem(term) in asked
        and stem(term) not in said
        and not any(stem(word) in said for word in stand_ins.get(term, []))
        for term in foreign
    )


class HeuristicEvaluator:
    """Judges an answer without an LLM: grounded, complete, a score, and a reason worded for
    the strategy picker (see ``docs/offline.md``).

    - **score**: the chance that the answer is right, from :class:`AnswerJudge`'s analysis
      (coverage of the question's terms and names, embedding similarity, the kind of answer
      asked for, words the documents never use, parts, grounding), calibrated on HotpotQA and
      MuSiQue (:func:`~ragloop.components.heuristics.judging.answer_probability`); the offline
      loops read it through the shipped calibration
      (:func:`~ragloop.components.heuristics.confidence.offline_calibration`) and stand by an
      answer at a target precision of 0.8 (``ragloop.offline.OFFLINE_TARGET_PRECISION``);
    - **grounded**: every answer sentence is supported by the chunks, lexically
      (:class:`~ragloop.LexicalGrounder`) or, with an embedder, by a chunk sentence whose
      embedding is close (for generators that paraphrase);
    - **complete**: the chunks and the answer cover the question's terms and names (a word the
      knowledge base never uses is covered by the corpus words that stand for it), every part
      of a multi-part question and the kind of answer asked for, and the answer does not just
      point at a document that was not retrieved (a second hop);
    - **reason**: the most useful problem, worded for :class:`~ragloop.HeuristicReformulator`'s
      keyword table ("no chunk mentions 'rent'": perspective shift; "multi-part question" and
      "missing second hop": decompose; "incomplete", "partial", "too generic": narrow;
      "unrelated", "no relevant": step back; "explain": hyde; anything else: expand).

    ``corpus`` (a :class:`~ragloop.KnowledgeBase`, a retriever or a ``Corpus``) lets it check
    which words the documents use at all, follow the link graph and use the embedder. ``judge``
    (an :class:`~ragloop.components.heuristics.judging.AnswerJudge`) may be shared with an
    :class:`~ragloop.ExtractiveGenerator`, which then analyses each answer once for both.
    """

    def __init__(
        self,
        *,
        corpus: object = None,
        grounder: LexicalGrounder | None = None,
        judge: AnswerJudge | None = None,
    ) -> None:
        self.analyst = judge or AnswerJudge(corpus=corpus, grounder=grounder)
        self.corpus = self.analyst.corpus
        self.grounder = self.analyst.grounder

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
        found = self.analyst.analyse(asked, chunks, answer)
        verdict = EvaluationResult(
            is_grounded=found.answered and found.grounded_share >= 1.0,
            is_complete=found.complete,
            score=round(answer_probability(asked, found), 4),
            reason=self.reason(asked, found),
        )
        return verdict, found

    def closest(self, query: str, chunks: list[Chunk], limit: int = 3) -> list[NearMiss]:
        """The passages of ``chunks`` that come closest to answering ``query``, best first:
        each chunk's best sentence and what follows it (:func:`closest_units`), its section,
        and how close it came (the sentence's score: the chance the extractive answer gives
        it)."""
        found = closest_units(query, chunks, self.corpus, limit=limit, chars=CLOSEST_CHARS)
        return [
            NearMiss(
                chunk_id=chunk.id,
                source=chunk.source,
                score=round(sentence.score, 4),
                text=quote,
                heading=sentence.heading or sentence.title or None,
            )
            for chunk, sentence, quote in found
        ]

    def evidence_gaps(self, query: str, chunks: list[Chunk], answer: str) -> EvidenceGaps:
        """Which parts of the question the answer's evidence covers (each with the chunk and
        the sentence that cover it) and which it does not, and the question's words no chunk
        contains (nothing in them standing for the word either). A question of one part is
        found when the answer is complete (every term, the kind of answer asked for, no
        second hop left)."""
        asked = profile(query)
        found = self.analyst.analyse(asked, chunks, answer) if chunks else Analysis()
        parts = asked.parts if asked.is_multi_part else [query]
        # a word the documents never use leaves its part unanswered unless the sentence that
        # answers the part says it in the corpus's words (a stand-in the chunks have is not
        # enough: "helicopter" read as "fly" is not found in a sentence about a tent's price)
        foreign = [t for t in found.foreign if not is_generic(t)]
        gaps = []
        for index, part in enumerate(parts):
            covered = found.part_sources.get(index)
            if not asked.is_multi_part and not found.complete:
                covered = None
            if covered is not None and _unsaid(foreign, part, covered[0], found.stand_ins):
                covered = None
            if covered is None:
                gaps.append(GapPart(part=part, found=False))
                continue
            claim, chunk = covered
            claim = _PASSAGE_LEAD.sub("", claim)  # a give-up's "The closest passage (...): "
            gaps.append(
                GapPart(
                    part=part,
                    found=True,
                    chunk_id=chunk.id,
                    source=chunk.source,
                    quote=claim[:QUOTE_CHARS],
                )
            )
        missing = found.unresolved if chunks else list(asked.terms)
        return EvidenceGaps(parts=gaps, missing_terms=missing)

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

"""Grounders: how faithful is an answer to the chunks it was written from?

- :class:`LLMJudgeGrounder` asks a model, in one call, to split the answer into verbatim atomic
  claims and judge each against the chunks (supported, unsupported, contradicted), citing chunk
  numbers (Arcana's LLMJudge, RAGAS-style faithfulness).
- :class:`LexicalGrounder` needs no model: a sentence is supported when enough of its content
  words, and every number in it, appear in the chunks that share words with it.

Both return a :class:`~ragloop.Grounding` whose score is supported claims / all claims. The
agent loop adds which search found each cited chunk (``AgentLoop.ground``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field

from ragloop.components.heuristics.corpus import chunk_context, chunk_text
from ragloop.components.llm.fitting import ask_fitted, fit_chunk_prompt
from ragloop.components.llm.prompts import judge_chunk, judge_prompt
from ragloop.core.calls import GenerateFn, resolve_llm, run_sync
from ragloop.core.errors import ConfigError, GroundingError
from ragloop.core.jsonparse import ParseFailure, parse_llm_json
from ragloop.core.limits import PromptFit, check_max_tokens
from ragloop.core.protocols import ChatModel
from ragloop.core.records import Chunk
from ragloop.core.records.agent import GroundedSpan, Grounding, SpanSource, Verdict
from ragloop.core.text import content_terms, is_number


def locate(answer: str, claim: str) -> tuple[int, int] | None:
    """Where ``claim`` is in ``answer``: verbatim first, then ignoring case and spacing."""
    claim = claim.strip()
    if not claim:
        return None
    at = answer.find(claim)
    if at >= 0:
        return at, at + len(claim)
    words = [re.escape(w) for w in claim.split()]
    found = re.search(r"\s+".join(words), answer, re.IGNORECASE)
    return (found.start(), found.end()) if found else None


def _split(grounded: list[tuple[GroundedSpan | None, bool]], claims: int, name: str) -> Grounding:
    supported = sum(1 for _, ok in grounded if ok)
    return Grounding(
        score=supported / claims if claims else 1.0,
        faithful_spans=[s for s, ok in grounded if s is not None and ok],
        hallucinated_spans=[s for s, ok in grounded if s is not None and not ok],
        grounder=name,
    )


# -- the LLM judge ------------------------------------------------------------------------------


def _verdict(value: object) -> Verdict:
    word = str(value or "").strip().lower()
    if word.startswith("support") or word in {"true", "yes", "faithful"}:
        return "supported"
    if word.startswith("contradict"):
        return "contradicted"
    return "unsupported"


def _indices(value: object) -> list[int]:
    items = value if isinstance(value, list | tuple) else [value]
    out: list[int] = []
    for item in items:
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            out.append(item)
        elif isinstance(item, str):
            out.extend(int(d) for d in re.findall(r"\d+", item))
    return out


class _Claim(BaseModel):
    text: str = ""
    verdict: Annotated[Verdict, BeforeValidator(_verdict)] = "unsupported"
    chunk_indices: Annotated[list[int], BeforeValidator(_indices)] = Field(default_factory=list)


class _JudgeReply(BaseModel):
    claims: list[_Claim] = Field(default_factory=list)


class LLMJudgeGrounder:
    """One model call: verbatim atomic claims, each supported / unsupported / contradicted with
    the chunks cited. Score = supported claims / all non-empty claims.

    ``generate_fn`` is a function of the prompt or a :class:`~ragloop.ChatModel`, ``model=`` a
    chat model (the rule: :func:`ragloop.core.calls.resolve_llm`). Chunk numbers out of
    range are dropped; a claim that cannot be found in the answer counts in the score but has no
    span. An unreadable reply raises :class:`~ragloop.GroundingError`.

    The reply is bounded by ``max_tokens`` (Arcana's ``judge_max_tokens``; default 1024,
    ``DEFAULT_MAX_TOKENS["grounder"]``); a cut reply keeps the claims judged before the cut.
    The prompt fits the model's context window, lowest-ranked chunks left out first.
    """

    name = "llm_judge"

    def __init__(
        self,
        generate_fn: GenerateFn | ChatModel | None = None,
        *,
        model: ChatModel | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.model = resolve_llm(generate_fn, model, owner="LLMJudgeGrounder")
        self.max_tokens = check_max_tokens(max_tokens)

    async def aground(self, answer: str, chunks: list[Chunk], **opts: Any) -> Grounding:
        if not answer.strip():
            return Grounding(score=1.0, grounder=self.name)
        if not chunks:
            return Grounding(score=0.0, grounder=self.name)
        question = opts.get("question")
        asked = question if isinstance(question, str) else None

        def build(room: int | None) -> tuple[str, PromptFit]:
            return fit_chunk_prompt(
                chunks,
                room,
                judge_chunk,
                lambda kept, left: judge_prompt(asked, kept, answer, omitted=left),
            )

        response = await ask_fitted(self.model, build, role="grounder", max_tokens=self.max_tokens)
        reply = response.text
        parsed = parse_llm_json(reply, _JudgeReply, cut=response.truncated)
        if isinstance(parsed, ParseFailure):
            raise GroundingError(f"judge reply unreadable ({parsed.reason}): {parsed.excerpt()}")
        claims = [c for c in parsed.value.claims if c.text.strip()]
        grounded: list[tuple[GroundedSpan | None, bool]] = []
        for claim in claims:
            where = locate(answer, claim.text)
            span = None
            if where is not None:
                sources = [
                    SpanSource(chunk_id=chunks[i - 1].id, score=1.0)
                    for i in dict.fromkeys(claim.chunk_indices)
                    if 1 <= i <= len(chunks)
                ]
                start, end = where
                span = GroundedSpan(
                    text=answer[start:end],
                    start=start,
                    end=end,
                    sources=sources,
                    verdict=claim.verdict,
                )
            grounded.append((span, claim.verdict == "supported"))
        return _split(grounded, len(claims), self.name)

    def ground(self, answer: str, chunks: list[Chunk], **opts: Any) -> Grounding:
        return run_sync(lambda: self.aground(answer, chunks, **opts))


# -- the lexical grounder -----------------------------------------------------------------------

# A sentence runs to ., ! or ? followed by a space or the end, or to a line break; "3.5" and
# "e.g." inside a sentence do not end it.
_SENTENCE = re.compile(r"(?:[^\n.!?]|[.!?](?![\s]|$))+[.!?]*")
_LEADING_MARKS = re.compile(r"(?:[\s>#*•\-]+|\d+[.)]\s+)+")


def _stem(token: str) -> str:
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def _terms(text: str) -> set[str]:
    return {_stem(t) for t in content_terms(text)}


def sentences(text: str) -> list[tuple[int, int]]:
    """Offsets of the sentences (and list items, lines) of ``text``, marks stripped."""
    out = []
    for match in _SENTENCE.finditer(text):
        start, end = match.start(), match.end()
        lead = _LEADING_MARKS.match(text, start, end)
        if lead:
            start = lead.end()
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            out.append((start, end))
    return out


class LexicalGrounder:
    """Grounds without a model, sentence by sentence.

    A sentence is a claim when it has content words. It is supported when at least
    ``threshold`` of its content words appear in the chunks that share at least
    ``min_source_score`` of them (together: a sentence may join facts from two chunks), and
    every number in it appears there too. Its sources are those chunks, best overlap first (at
    most ``max_sources``), each scored by the share of the sentence's words it holds. Fast and
    free, but blind to paraphrase: prefer :class:`LLMJudgeGrounder` when a model is available.
    """

    name = "lexical"

    def __init__(
        self, *, threshold: float = 0.6, min_source_score: float = 0.2, max_sources: int = 3
    ) -> None:
        for field, value in (("threshold", threshold), ("min_source_score", min_source_score)):
            if not 0.0 < value <= 1.0:
                raise ConfigError(field, f"must be in (0, 1], got {value!r}")
        if max_sources < 1:
            raise ConfigError("max_sources", f"must be >= 1, got {max_sources!r}")
        self.threshold = threshold
        self.min_source_score = min_source_score
        self.max_sources = max_sources

    def ground(self, answer: str, chunks: list[Chunk], **opts: Any) -> Grounding:
        if not answer.strip():
            return Grounding(score=1.0, grounder=self.name)
        if not chunks:
            return Grounding(score=0.0, grounder=self.name)
        chunk_terms = [_terms(chunk_text(c)) for c in chunks]  # headings are text too
        heading_terms = [_terms(chunk_context(c)) for c in chunks]
        grounded: list[tuple[GroundedSpan | None, bool]] = []
        for start, end in sentences(answer):
            text = answer[start:end]
            terms = _terms(text)
            if not terms:
                continue
            # of chunks that hold as much of the sentence, the one whose headings name more of
            # it ("os.cpu_count(): Return the number of CPUs." under os.cpu_count(), not
            # under multiprocessing.cpu_count(), which says the same)
            overlaps = sorted(
                (
                    (len(terms & ct) / len(terms), len(terms & heading_terms[i]), i)
                    for i, ct in enumerate(chunk_terms)
                ),
                key=lambda entry: (-entry[0], -entry[1], entry[2]),
            )
            backing = [(s, i) for s, _, i in overlaps if s >= self.min_source_score]
            covered = set().union(*(chunk_terms[i] for _, i in backing)) & terms
            numbers = {t for t in terms if is_number(t)}
            ok = len(covered) / len(terms) >= self.threshold and numbers <= covered
            sources = [
                SpanSource(chunk_id=chunks[i].id, score=round(s, 4))
                for s, i in backing[: self.max_sources]
            ]
            verdict: Verdict = "supported" if ok else "unsupported"
            span = GroundedSpan(text=text, start=start, end=end, sources=sources, verdict=verdict)
            grounded.append((span, ok))
        return _split(grounded, len(grounded), self.name)

    async def aground(self, answer: str, chunks: list[Chunk], **opts: Any) -> Grounding:
        return self.ground(answer, chunks, **opts)

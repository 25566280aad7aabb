"""Generators: answer the question from the retrieved chunks, citing them.

- :class:`ExtractiveGenerator` needs no model: it picks the sentences of the chunks that best
  answer the question (see :mod:`ragloop.components.extractive`) and returns them with numbered
  citations and a confidence.
- :class:`LLMGenerator` asks a model for a short cited answer and its confidence.

Both write answers in one format: sentences followed by ``[n]`` markers, then a line
``Sources: [1] returns.md; [2] ...`` naming the chunk sources the markers refer to.
:func:`strip_citations` gives the bare text back (what evaluators and metrics should read).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, field_validator

from ragloop.components.corpus import Corpus
from ragloop.components.extractive import (
    Sentence,
    SentenceScorer,
    select,
    sentence_similarity,
    split_chunks,
)
from ragloop.components.fitting import ask_fitted, fit_chunk_prompt
from ragloop.components.prompts import fence_chunk, generator_prompt
from ragloop.core.calls import GenerateFn, resolve_llm, run_sync
from ragloop.core.errors import ConfigError
from ragloop.core.jsonparse import ParseFailure, UnitScore, parse_llm_json
from ragloop.core.limits import PromptFit, check_max_tokens
from ragloop.core.protocols import ChatModel
from ragloop.core.rag_records import GeneratorOutput
from ragloop.core.records import Chunk

NO_ANSWER = "The documents retrieved do not answer this question."
_SOURCES_LINE = re.compile(r"\n+Sources:[^\n]*\s*$")
_MARKER = re.compile(r"\s*\[\d+(?:,\s*\d+)*\]")

# Confidence = logistic(a + b * coverage + c * missing answer type), fitted by
# benchmarks/calibrate_offline.py on 300 HotpotQA questions outside bench_eval.py's sample.
CONFIDENCE_COEFFICIENTS = (-1.85, 2.03, -1.04)


def strip_citations(answer: str) -> str:
    """The answer without its ``[n]`` markers and its ``Sources:`` line."""
    return _MARKER.sub("", _SOURCES_LINE.sub("", answer)).strip()


def source_label(chunk: Chunk) -> str:
    title = chunk.metadata.get("title")
    heading = (chunk.metadata.get("heading_path") or [None])[-1]
    where = heading if heading and heading != title else title
    return f"{chunk.source} ({where})" if where and where != chunk.source else chunk.source


def with_sources(text: str, chunks: Sequence[Chunk]) -> str:
    """``text`` with a ``Sources:`` line for the chunk numbers its ``[n]`` markers cite."""
    cited = sorted({int(n) for m in _MARKER.findall(text) for n in re.findall(r"\d+", m)})
    labels = [f"[{n}] {source_label(chunks[n - 1])}" for n in cited if 1 <= n <= len(chunks)]
    return f"{text}\n\nSources: {'; '.join(labels)}" if labels else text


class ExtractiveGenerator:
    """Answers by quoting the chunks: no model, no invented words.

    It scores every sentence of the chunks for the question (coverage of its terms and names,
    the kind of answer it asks for, embedding similarity when ``corpus`` brings an embedder,
    retrieval score), takes the best one, then adds the sentences that answer the other parts
    of a multi-part question or follow a name the first one introduces (the bridge of a
    multi-hop question), at most ``max_sentences``. Each sentence is followed by ``[n]``, the
    number of its source in the ``Sources:`` line.

    ``confidence`` is a logistic function of how much of the question the answer covers and of
    whether it lacks the kind of answer asked for, fitted on HotpotQA so that it reads as the
    chance that the answer contains the right one.
    """

    def __init__(self, *, corpus: object = None, max_sentences: int = 3) -> None:
        if not isinstance(max_sentences, int) or max_sentences < 1:
            raise ConfigError("max_sentences", f"must be an integer >= 1, got {max_sentences!r}")
        self.corpus = None if corpus is None else Corpus.of(corpus)
        self.max_sentences = max_sentences

    def pick(self, query: str, chunks: Sequence[Chunk]) -> tuple[list[Sentence], SentenceScorer]:
        """The chosen sentences (best first) and the scorer that chose them."""
        sentences = split_chunks(chunks)
        scorer = SentenceScorer.build(query, sentences)
        similarity = sentence_similarity(self.corpus, scorer, chunks)
        ranked = scorer.score(chunks, similarity, self.corpus)
        return select(scorer, ranked, max_sentences=self.max_sentences), scorer

    def generate(self, query: str, chunks: list[Chunk]) -> GeneratorOutput:
        chosen, scorer = self.pick(query, chunks)
        if not chosen:
            return GeneratorOutput(answer=NO_ANSWER, confidence=0.0)
        numbers: dict[int, int] = {}  # chunk index -> citation number
        parts = []
        for sentence in chosen:
            n = numbers.setdefault(sentence.chunk, len(numbers) + 1)
            parts.append(f"{sentence.text} [{n}]")
        cited = [chunks[i] for i in sorted(numbers, key=numbers.__getitem__)]
        answer = with_sources(" ".join(parts), cited)
        return GeneratorOutput(answer=answer, confidence=self.confidence(scorer, chosen))

    @staticmethod
    def features(scorer: SentenceScorer, chosen: list[Sentence]) -> tuple[float, float]:
        """What the confidence is computed from: the weighted share of the question the answer
        covers, and whether it lacks the kind of answer asked for (a duration, an amount, ...)."""
        stems: set[str] = set()
        context: set[str] = set()
        soft: set[str] = set()
        for sentence in chosen:
            stems |= sentence.stems
            context |= sentence.context_stems
            soft |= sentence.soft_stems
        coverage = scorer.coverage(stems, frozenset(context), soft=soft)
        asked = scorer.question.answer_type not in (None, "yesno")
        missing_type = float(asked and not any(s.features.get("type") for s in chosen))
        return coverage, missing_type

    @classmethod
    def confidence(cls, scorer: SentenceScorer, chosen: list[Sentence]) -> float:
        a, *weights = CONFIDENCE_COEFFICIENTS
        z = a + sum(w * x for w, x in zip(weights, cls.features(scorer, chosen), strict=True))
        return round(1.0 / (1.0 + math.exp(-z)), 4)


class _GeneratorReply(BaseModel):
    answer: str
    confidence: UnitScore = 0.5

    @field_validator("answer", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return "" if value is None else str(value)


class LLMGenerator:
    """Asks a model for a short answer with ``[n]`` citations and a confidence.

    ``generate_fn`` is a function of the prompt (sync or async) or a
    :class:`~ragloop.ChatModel`; ``model=`` names a chat model explicitly (see
    :func:`ragloop.core.calls.resolve_llm` for the rule). A reply that is not the expected JSON
    is taken as the answer itself, with confidence 0.5. Citations are resolved into a
    ``Sources:`` line.

    The reply is bounded by ``max_tokens`` (default 512, ``DEFAULT_MAX_TOKENS["generator"]``;
    never more than the model's own ``max_tokens``); a reply cut by it is read as far as it
    goes. The prompt fits the model's context window: the chunks are kept in rank order and
    the lowest-ranked ones left out (see :mod:`ragloop.components.fitting`).
    """

    def __init__(
        self,
        generate_fn: GenerateFn | ChatModel | None = None,
        *,
        model: ChatModel | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.generate_fn = resolve_llm(generate_fn, model, owner="LLMGenerator")
        self.max_tokens = check_max_tokens(max_tokens)

    async def agenerate(self, query: str, chunks: list[Chunk]) -> GeneratorOutput:
        def build(room: int | None) -> tuple[str, PromptFit]:
            return fit_chunk_prompt(
                chunks,
                room,
                fence_chunk,
                lambda kept, left: generator_prompt(query, kept, omitted=left),
            )

        response = await ask_fitted(
            self.generate_fn, build, role="generator", max_tokens=self.max_tokens
        )
        reply = response.text
        parsed = parse_llm_json(reply, _GeneratorReply, cut=response.truncated)
        if isinstance(parsed, ParseFailure):
            text, confidence = reply.strip(), 0.5
        else:
            text, confidence = parsed.value.answer.strip(), parsed.value.confidence
        if not text:
            return GeneratorOutput(answer=NO_ANSWER, confidence=0.0)
        return GeneratorOutput(answer=with_sources(text, chunks), confidence=confidence)

    def generate(self, query: str, chunks: list[Chunk]) -> GeneratorOutput:
        return run_sync(lambda: self.agenerate(query, chunks))

"""Generators: answer the question from the retrieved chunks, citing them.

- :class:`ExtractiveGenerator` needs no model: it picks the sentences of the chunks that best
  answer the question (see :mod:`ragloop.components.heuristics.extractive`) and returns them
  with numbered citations and a confidence.
- :class:`LLMGenerator` asks a model for a short cited answer and its confidence.

Both write answers in the format of :mod:`ragloop.components.citations` (sentences with
``[n]`` markers, then a ``Sources:`` line).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, field_validator

from ragloop.components.citations import NO_ANSWER, UNSURE, with_sources
from ragloop.components.citations import strip_citations as strip_citations  # re-exported
from ragloop.components.heuristics.corpus import Corpus
from ragloop.components.heuristics.extractive import (
    HEADING_NAMED,
    Sentence,
    SentenceScorer,
    code_name_found,
    section_name,
    sentence_similarity,
    split_chunks,
)
from ragloop.components.heuristics.judging import AnswerJudge, answer_probability
from ragloop.components.heuristics.naming import lead_with_name
from ragloop.components.heuristics.questions import QuestionProfile, gives_answer_type, profile
from ragloop.components.heuristics.selection import rank_for_parts, select
from ragloop.components.llm.fitting import ask_fitted, fit_chunk_prompt
from ragloop.components.llm.prompts import fence_chunk, generator_prompt
from ragloop.core.calls import GenerateFn, resolve_llm, run_sync
from ragloop.core.errors import ConfigError
from ragloop.core.jsonparse import ParseFailure, UnitScore, parse_llm_json
from ragloop.core.limits import PromptFit, check_max_tokens
from ragloop.core.protocols import ChatModel
from ragloop.core.records import Chunk
from ragloop.core.records.rag import GeneratorOutput
from ragloop.core.text import content_stems


class ExtractiveGenerator:
    """Answers by quoting the chunks: no model, no invented words.

    It scores every sentence of the chunks for the question (coverage of its terms and names,
    the kind of answer it asks for, embedding similarity when ``corpus`` brings an embedder,
    retrieval score), takes the best one, then adds the sentences that answer the other parts
    of a multi-part question or follow a name the first one introduces (the bridge of a
    multi-hop question), at most ``max_sentences``. Each sentence is followed by ``[n]``, the
    number of its source in the ``Sources:`` line.

    A sentence whose subject is named only by the heading it sits under ("New in version
    3.11." under ``contextlib.chdir(path)``, "within 45 days" under "Sending items back from
    abroad") is quoted with that heading: ``heading: sentence``. A question asking for a name
    ("Which module should I use to ...?") is answered with the name of the API the passage
    documents, from its heading, then the sentence that says what it is for: "`timeit`: This
    module provides a simple way to time small bits of Python code." So is the part of a
    multi-part question that asks for one ("..., and which list method adds an item at the
    end?": "append(x): Add an item to the end of the list.").
    (:mod:`ragloop.components.heuristics.naming`).

    An answer whose confidence is below ``unsure_below`` (0.5) starts with "The documents may
    not answer this; the closest they come:" (:data:`~ragloop.components.citations.UNSURE`),
    so that nobody takes the closest passage for an answer.

    ``confidence`` is the chance that the answer is right, as
    :class:`~ragloop.HeuristicEvaluator` would score it
    (:func:`~ragloop.components.heuristics.judging.answer_probability`, calibrated on HotpotQA).
    """

    def __init__(
        self,
        *,
        corpus: object = None,
        max_sentences: int = 3,
        unsure_below: float = 0.5,
        judge: AnswerJudge | None = None,
    ) -> None:
        if not isinstance(max_sentences, int) or max_sentences < 1:
            raise ConfigError("max_sentences", f"must be an integer >= 1, got {max_sentences!r}")
        if not 0.0 <= unsure_below <= 1.0:
            raise ConfigError("unsure_below", f"must be in [0, 1], got {unsure_below!r}")
        self.corpus = None if corpus is None else Corpus.of(corpus)
        self.max_sentences = max_sentences
        self.unsure_below = unsure_below
        self.judge = judge or AnswerJudge(corpus=self.corpus)

    def pick(self, query: str, chunks: Sequence[Chunk]) -> tuple[list[Sentence], SentenceScorer]:
        """The chosen sentences (best first) and the scorer that chose them."""
        asked = profile(query)
        sentences = split_chunks(chunks, with_signatures=asked.answer_type == "default")
        scorer = SentenceScorer.build(asked, sentences)
        similarity = sentence_similarity(self.corpus, scorer, chunks)
        parts = rank_for_parts(scorer.question, sentences, chunks, self.corpus)
        ranked = scorer.score(chunks, similarity, self.corpus)
        chosen = select(scorer, ranked, max_sentences=self.max_sentences, parts=parts)
        return chosen, scorer

    def generate(self, query: str, chunks: list[Chunk]) -> GeneratorOutput:
        chosen, scorer = self.pick(query, chunks)
        if not chosen:
            return GeneratorOutput(answer=NO_ANSWER, confidence=0.0)
        # a question asking which module / function / option leads with the API's name
        chosen, name = lead_with_name(scorer.question, chosen, scorer.sentences, chunks)
        numbers: dict[int, int] = {}  # chunk index -> citation number
        parts = []
        for i, sentence in enumerate(chosen):
            n = numbers.setdefault(sentence.chunk, len(numbers) + 1)
            text = f"`{name}`: {sentence.text}" if name and i == 0 else quoted(sentence, scorer)
            parts.append(f"{text} [{n}]")
        cited = [chunks[i] for i in sorted(numbers, key=numbers.__getitem__)]
        answer = with_sources(" ".join(parts), cited)
        found = self.judge.analyse(scorer.question, chunks, answer)
        confidence = round(answer_probability(scorer.question, found), 4)
        if confidence < self.unsure_below:  # say so, and still show what came closest
            answer = f"{UNSURE} {answer}"
        return GeneratorOutput(answer=answer, confidence=confidence)


def quoted(sentence: Sentence, scorer: SentenceScorer) -> str:
    """The sentence as the answer quotes it: with the name of its section (its heading, else
    its page's title) when that names what the sentence does not: a question term or name, or
    the API or exception a part asks for ("which function ...", "which exception ...")."""
    asked = scorer.question
    names = [
        section_name(sentence, asked, naming=kind)
        for part, kind in named_parts(asked, sentence)
        if not gives_answer_type(kind, sentence.text, part)
    ]
    naming = next((n for n in names if n), "")  # the section names what a part asks for
    name = naming or section_name(sentence, asked)
    if not name or name in sentence.text or sentence.kind == "signature":
        return sentence.text
    own = sentence.stems - sentence.loose_stems
    in_heading = bool(sentence.heading) and (
        bool((content_stems(sentence.heading) & set(scorer.weights)) - own)
        or any(
            code_name_found(n, sentence.heading, frozenset(content_stems(sentence.heading)))
            and not code_name_found(n, sentence.text, frozenset(own))
            for n in [*asked.identifiers, *asked.entities]
        )
    )
    return f"{name}: {sentence.text}" if in_heading or naming else sentence.text


def named_parts(asked: QuestionProfile, sentence: Sentence) -> list[tuple[str, str]]:
    """The question, or those of its parts that the sentence speaks to, that ask for a name
    a section's heading gives (:data:`HEADING_NAMED`: an API's, an exception's: "..., and
    which OrderedDict method moves a key to either end?"), each with its answer type."""
    if asked.answer_type in HEADING_NAMED:
        return [(asked.text, asked.answer_type)]
    if not asked.is_multi_part:
        return []
    kinds = [(part, profile(part).answer_type) for part in asked.parts]
    return [
        (part, kind)
        for part, kind in kinds
        if kind in HEADING_NAMED and content_stems(part) & sentence.stems
    ]


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
    the lowest-ranked ones left out (see :mod:`ragloop.components.llm.fitting`).
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

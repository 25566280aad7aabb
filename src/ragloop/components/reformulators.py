"""Reformulators: rewrite the retrieval query after a failing iteration.

:class:`HeuristicReformulator` picks a strategy from the evaluator's reason with ragsnag's keyword
table and rewrites the query without an LLM (see :mod:`ragloop.components.heuristics.rewriting`
for what each strategy does). :class:`LLMReformulator` asks an LLM and falls back to the
heuristic one.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, model_validator

from ragloop.components.heuristics.corpus import Corpus
from ragloop.components.heuristics.rewriting import rewrite, tried_queries
from ragloop.components.llm.fitting import ask_fitted, estimate_tokens
from ragloop.components.llm.prompts import reformulator_prompt
from ragloop.core.calls import GenerateFn, resolve_llm, run_sync
from ragloop.core.jsonparse import ParseFailure, StrList, lenient_enum, parse_llm_json
from ragloop.core.limits import PromptFit, check_max_tokens
from ragloop.core.protocols import ChatModel
from ragloop.core.records.rag import LoopIteration, ReformulationOutput, ReformulationStrategy
from ragloop.core.text import normalize_query

# ragsnag's table, in its order: the first strategy with a matching keyword wins.
STRATEGY_KEYWORDS: dict[ReformulationStrategy, tuple[str, ...]] = {
    ReformulationStrategy.PERSPECTIVE_SHIFT: (
        "vocabulary",
        "terminology",
        "different words",
        "jargon",
        "synonym",
        "no chunk",
        "nothing found",
        "not retrieved",
    ),
    ReformulationStrategy.NARROW: (
        "too generic",
        "too broad",
        "surface level",
        "vague",
        "general",
        "incomplete",
        "partial",
        "missing specific",
    ),
    ReformulationStrategy.DECOMPOSE: (
        "multi-part",
        "multiple question",
        "two question",
        "missing second",
        "missing third",
        "also ask",
        "additionally",
    ),
    ReformulationStrategy.STEP_BACK: ("no relevant", "completely off", "unrelated", "abstract"),
    ReformulationStrategy.HYDE: ("conceptual", "how does", "explain", "mechanism", "describe"),
}


def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    # Whole words only ("general" must not match "generally"), plural and verb endings allowed,
    # and "multi-part", "multi part" and "multipart" are one keyword.
    words = [re.escape(w) for w in re.split(r"[\s\-]+", keyword)]
    return re.compile(r"\b" + r"[\s\-]*".join(words) + r"(?:s|es|ed|d|ing)?\b")


_PATTERNS = [
    (strategy, [_keyword_pattern(k) for k in keywords])
    for strategy, keywords in STRATEGY_KEYWORDS.items()
]


def select_strategy(reason: str) -> ReformulationStrategy:
    """The strategy ragsnag's keyword table assigns to an evaluation reason (EXPAND if none)."""
    text = reason.lower()
    for strategy, patterns in _PATTERNS:
        if any(p.search(text) for p in patterns):
            return strategy
    return ReformulationStrategy.EXPAND


class HeuristicReformulator:
    """Rewrites queries without an LLM: keyword-table strategy choice, real rewrites.

    The strategy comes from the last iteration's evaluation reason (:meth:`select_strategy`);
    an evaluator reply that could not be parsed, or an empty history, selects EXPAND. Unlike
    ragsnag's, every strategy returns a query that differs from every query already tried.

    ``corpus`` (a :class:`~ragloop.KnowledgeBase`, a retriever, or a
    :class:`~ragloop.components.heuristics.corpus.Corpus`) lets the strategies consult the
    knowledge base
    itself, not only the chunks earlier iterations retrieved: related terms from a wider search
    and the embedder, replacements for words the documents never use, and the link graph's
    next hops (see ``docs/reformulation.md``).
    """

    select_strategy = staticmethod(select_strategy)

    def __init__(self, corpus: object = None) -> None:
        self.corpus = None if corpus is None else Corpus.of(corpus)

    def strategy_for(self, history: list[LoopIteration]) -> ReformulationStrategy:
        if not history or history[-1].evaluation.parse_failed:
            return ReformulationStrategy.EXPAND
        return select_strategy(history[-1].evaluation.reason)

    def reformulate(self, original_query: str, history: list[LoopIteration]) -> ReformulationOutput:
        return self.reformulate_with(self.strategy_for(history), original_query, history)

    def reformulate_with(
        self,
        strategy: ReformulationStrategy,
        original_query: str,
        history: list[LoopIteration],
    ) -> ReformulationOutput:
        """Rewrite with a given strategy (used by the LLM reformulator's fallback)."""
        queries, how = rewrite(strategy, original_query, history, self.corpus)
        why = history[-1].evaluation.reason[:100] if history else "no earlier iteration"
        return ReformulationOutput(
            queries=queries,
            strategy=strategy,
            reasoning=f"Heuristic selected '{strategy.value}' based on: {why}; {how}",
        )


class _ReformulationReply(BaseModel):
    strategy: Annotated[ReformulationStrategy, BeforeValidator(lenient_enum(ReformulationStrategy))]
    queries: StrList
    reasoning: str = ""

    @model_validator(mode="before")
    @classmethod
    def _accept_single_query(cls, data: Any) -> Any:
        if isinstance(data, dict) and "queries" not in data and "query" in data:
            data = {**data, "queries": data["query"]}
        if isinstance(data, dict) and not isinstance(data.get("reasoning", ""), str):
            data = {**data, "reasoning": str(data["reasoning"])}
        return data


class LLMReformulator:
    """Asks an LLM to pick a strategy and write new queries from the whole history.

    ``generate_fn`` is a function of the prompt (sync or async) or a
    :class:`~ragloop.ChatModel`; ``model=`` names a chat model explicitly (the rule:
    :func:`ragloop.core.calls.resolve_llm`). A reply that cannot be read, that has no queries,
    or whose queries were all tried already falls back to :class:`HeuristicReformulator` (the
    strategy the LLM named if it named a valid one, else the keyword table's; given ``corpus``,
    it consults the knowledge base), and the reasoning says so.

    The reply is bounded by ``max_tokens`` (default 256, ``DEFAULT_MAX_TOKENS["reformulator"]``)
    and a cut one is read as far as it goes. The prompt fits the model's context window: the
    latest attempts are shown in full, older ones only by the queries they tried.
    """

    def __init__(
        self,
        generate_fn: GenerateFn | ChatModel | None = None,
        *,
        model: ChatModel | None = None,
        corpus: object = None,
        max_tokens: int | None = None,
    ) -> None:
        self.generate_fn = resolve_llm(generate_fn, model, owner="LLMReformulator")
        self.fallback = HeuristicReformulator(corpus)
        self.max_tokens = check_max_tokens(max_tokens)

    async def areformulate(
        self, original_query: str, history: list[LoopIteration]
    ) -> ReformulationOutput:
        def build(room: int | None) -> tuple[str, PromptFit]:
            start = 0
            prompt = reformulator_prompt(original_query, history)
            # the oldest attempts give way first; the last one always stays
            while room is not None and estimate_tokens(prompt) > room and start < len(history) - 1:
                start += 1
                prompt = reformulator_prompt(
                    original_query, history[start:], omitted=history[:start]
                )
            notes = [f"attempts 1-{start} shown only by their queries"] if start else []
            return prompt, PromptFit(history_dropped=start, notes=notes)

        response = await ask_fitted(
            self.generate_fn, build, role="reformulator", max_tokens=self.max_tokens
        )
        reply = response.text
        parsed = parse_llm_json(reply, _ReformulationReply, cut=response.truncated)
        if isinstance(parsed, ParseFailure):
            return self._fall_back(
                None, original_query, history, f"LLM reply unusable ({parsed.reason})"
            )
        value = parsed.value
        tried = tried_queries(original_query, history)
        fresh = [q for q in value.queries if normalize_query(q) not in tried]
        if not value.queries:
            return self._fall_back(value.strategy, original_query, history, "LLM gave no query")
        if not fresh:
            return self._fall_back(
                value.strategy, original_query, history, "LLM proposed only queries already tried"
            )
        return ReformulationOutput(
            queries=value.queries, strategy=value.strategy, reasoning=value.reasoning
        )

    def reformulate(self, original_query: str, history: list[LoopIteration]) -> ReformulationOutput:
        return run_sync(lambda: self.areformulate(original_query, history))

    def _fall_back(
        self,
        strategy: ReformulationStrategy | None,
        original_query: str,
        history: list[LoopIteration],
        why: str,
    ) -> ReformulationOutput:
        chosen = strategy or self.fallback.strategy_for(history)
        out = self.fallback.reformulate_with(chosen, original_query, history)
        return out.model_copy(
            update={"reasoning": f"{why}; fell back to heuristic rewriting. {out.reasoning}"}
        )

"""What the engines are configured with, in one place: :class:`~ragloop.LoopConfig`
(RAGLoop), :class:`~ragloop.RetrievalLoopConfig` (RetrievalLoop), and the typed keyword options
of each engine's ``offline`` constructor (:class:`RAGLoopOptions`, :class:`AgentLoopOptions`,
:class:`RetrievalLoopOptions`), with the function types they name. An invalid value raises
:class:`~ragloop.ConfigError` naming the field; an unknown option name does too
(:func:`~ragloop.core.errors.check_options`)."""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from ragloop.components.calibration import IDENTITY, Calibration
from ragloop.core.budget import Budget, check_budget
from ragloop.core.calls import ChatFn, GenerateFn
from ragloop.core.errors import ConfigError
from ragloop.core.protocols import ChatModel, Evaluator, Generator, Reformulator
from ragloop.core.records import Chunk, Message, Tool
from ragloop.core.records.rag import LoopIteration
from ragloop.core.records.retrieval import RetrievalIteration

OnIteration = Callable[[LoopIteration], Any]
Synthesizer = Callable[[list[Message]], "str | Awaitable[str]"]
SearchFn = Callable[..., "list[Chunk] | Awaitable[list[Chunk]]"]
# a system prompt written from the loop's options (Arcana's ``fn opts -> string``)
SystemPromptFn = Callable[[dict[str, Any]], "str | Awaitable[str]"]


def check_count(value: object, name: str, minimum: int = 1) -> int:
    """``value``, an integer of at least ``minimum``; else a ConfigError naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(name, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _is_fraction(value: object) -> bool:
    """A number in [0, 1] (not a bool, not NaN)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and not math.isnan(value)
        and 0.0 <= value <= 1.0
    )


# -- RAGLoop ------------------------------------------------------------------------------------


@dataclass
class LoopConfig:
    """Settings of a :class:`~ragloop.RAGLoop`. Invalid values raise ``ValueError`` naming the
    field.

    - ``max_iterations``: attempts at most (>= 1).
    - ``confidence_threshold``: evaluation score that counts as converged, in [0, 1].
    - ``top_k``: chunks per retrieval call, per sub-query (>= 1).
    - ``on_iteration``: called (sync or async) with every finished iteration; returning
      ``False`` ends the run with ``StopReason.CALLER_STOP`` unless that iteration converged.
    - ``budget``: a :class:`~ragloop.Budget` checked before every step.
    - ``on_error``: ``"raise"`` lets a component's exception propagate (with a note naming the
      step); ``"stop"`` ends the run with ``StopReason.ERROR`` and keeps the partial trace.
    - ``stop_on_repeat``: end with ``StopReason.NO_IMPROVEMENT`` instead of re-running an
      iteration whose queries were all tried and whose chunks an earlier iteration already had.
    - ``max_sub_queries``: a reformulation's queries beyond this many are dropped.
    - ``target_precision``: when set, the run converges only when the calibrated chance that
      the answer is right (``calibration.probability(score)``) reaches it, and
      ``confidence_threshold`` is not used; otherwise it returns its best attempt, not
      confident, with the evidence gaps (``LoopResult.gaps``).
    - ``calibration``: what the evaluator's score means (a
      :class:`~ragloop.components.calibration.Calibration`, or the path of one written by
      ``ragloop eval --calibrate``); None takes the score as the chance.
    """

    max_iterations: int = 3
    confidence_threshold: float = 0.8
    top_k: int = 5
    on_iteration: OnIteration | None = None
    budget: Budget | None = None
    on_error: Literal["raise", "stop"] = "raise"
    stop_on_repeat: bool = False
    max_sub_queries: int = 5
    target_precision: float | None = None
    calibration: Calibration | None = None

    def __post_init__(self) -> None:
        for name in ("max_iterations", "top_k", "max_sub_queries"):
            check_count(getattr(self, name), name, 1)
        threshold = self.confidence_threshold
        if not _is_fraction(threshold):
            raise ConfigError(
                "confidence_threshold", f"must be a number in [0.0, 1.0], got {threshold!r}"
            )
        self.target_precision = check_target_precision(self.target_precision)
        self.calibration = calibration_of(self.calibration)
        if self.on_iteration is not None and not callable(self.on_iteration):
            raise ConfigError("on_iteration", "must be callable or None")
        if isinstance(self.budget, dict):
            self.budget = Budget(**self.budget)
        check_budget(self.budget)
        if self.on_error not in ("raise", "stop"):
            raise ConfigError("on_error", f"must be 'raise' or 'stop', got {self.on_error!r}")
        if not isinstance(self.stop_on_repeat, bool):
            raise ConfigError("stop_on_repeat", "must be True or False")

    def probability(self, score: float) -> float:
        """The chance that an answer with this evaluation score is right."""
        return (self.calibration or IDENTITY).probability(score)

    @property
    def score_threshold(self) -> float:
        """The evaluation score at which a run converges."""
        if self.target_precision is None:
            return self.confidence_threshold
        return (self.calibration or IDENTITY).score_for(self.target_precision)

    def converges(self, score: float) -> bool:
        """Whether an iteration with this evaluation score ends the run converged."""
        if self.target_precision is not None:
            return self.probability(score) >= self.target_precision
        return score >= self.confidence_threshold


def check_target_precision(value: object) -> float | None:
    """``value`` as a target precision: None or a number in [0, 1]; else a ConfigError."""
    if value is not None and not _is_fraction(value):
        raise ConfigError("target_precision", f"must be None or a number in [0, 1], got {value!r}")
    return None if value is None else float(value)  # type: ignore[arg-type]


def calibration_of(value: object) -> Calibration | None:
    """``value`` as a calibration: None, a Calibration, or the path of a saved one."""
    if value is None or isinstance(value, Calibration):
        return value
    if isinstance(value, str | os.PathLike):
        return Calibration.load(value)
    raise ConfigError(
        "calibration", f"must be a Calibration or the path of one, got {type(value).__name__}"
    )


class RAGLoopOptions(TypedDict, total=False):
    """The keyword options of :meth:`RAGLoop.offline <ragloop.RAGLoop.offline>`: the fields of
    :class:`~ragloop.LoopConfig` (or a whole ``config=``), ``model=`` (the LLM components
    instead of the offline ones), or a component to use instead of the default one. An unknown
    name is a ``ConfigError``."""

    model: ChatModel | GenerateFn | None
    config: LoopConfig
    generator: Generator
    evaluator: Evaluator
    reformulator: Reformulator
    max_iterations: int
    confidence_threshold: float
    top_k: int
    on_iteration: OnIteration | None
    budget: Budget | None
    on_error: Literal["raise", "stop"]
    stop_on_repeat: bool
    max_sub_queries: int
    target_precision: float | None
    calibration: Calibration | str | os.PathLike[str] | None


# -- RetrievalLoop ------------------------------------------------------------------------------


@dataclass
class RetrievalLoopConfig:
    """Settings of a :class:`~ragloop.RetrievalLoop`. Invalid values raise ``ValueError`` naming
    the field.

    - ``max_iterations``: iterations at most (>= 1);
    - ``min_new_chunks_per_iter``: an iteration after the first that adds fewer new chunks ends
      the run with ``diminishing_returns`` (0 disables the rule);
    - ``top_k``: chunks per search (>= 1);
    - ``improvement_threshold``: when set (in [0, 1]), an iteration whose best score is less than
      this above the best so far ends the run with ``no_improvement`` (seed 003);
    - ``allow_route_switch``: False (sticky) keeps iteration 0's route; True asks the router
      every iteration;
    - ``follow_links``: after each search, the chunks that the best this-many new chunks name
      (by title or heading, through the knowledge base's link graph) join the evidence, ranked
      as the top result of a next hop would be (0 disables it; needs a knowledge-base
      retriever or router, and keeps to its collections and filters);
    - ``on_error``: ``"raise"`` lets a component's exception propagate (with a note naming the
      step); ``"stop"`` ends the run with ``StopReason.ERROR``, the evidence gathered so far and
      the message in ``RetrievalResult.error``;
    - ``direct_first``: True ranks the evidence the first iteration's searches found first, in
      their order: a later search or a link can move one of those chunks up (to the rank it
      would give a new chunk), and puts the chunks only it found after them, so the evidence
      never ranks a chunk of the question's own results lower than its search did because a
      hop went astray; a chunk those searches did not find passes them only when a later
      search and a link both found it (the offline loops use it);
    - ``budget``: the :class:`~ragloop.Budget` of every run that is not given its own.
    """

    max_iterations: int = 5
    min_new_chunks_per_iter: int = 2
    top_k: int = 10
    improvement_threshold: float | None = None
    allow_route_switch: bool = False
    follow_links: int = 0
    on_error: Literal["raise", "stop"] = "raise"
    direct_first: bool = False
    budget: Budget | None = None

    def __post_init__(self) -> None:
        check_count(self.max_iterations, "max_iterations", 1)
        check_count(self.min_new_chunks_per_iter, "min_new_chunks_per_iter", 0)
        check_count(self.top_k, "top_k", 1)
        check_count(self.follow_links, "follow_links", 0)
        threshold = self.improvement_threshold
        if threshold is not None and not _is_fraction(threshold):
            raise ConfigError(
                "improvement_threshold", f"must be None or a number in [0, 1], got {threshold!r}"
            )
        for flag in ("allow_route_switch", "direct_first"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(flag, "must be True or False")
        if self.on_error not in ("raise", "stop"):
            raise ConfigError("on_error", f"must be 'raise' or 'stop', got {self.on_error!r}")
        check_budget(self.budget)


class RetrievalLoopOptions(TypedDict, total=False):
    """The keyword options of :meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>`: the
    fields of :class:`~ragloop.RetrievalLoopConfig` (or a whole ``config=``), a ``glossary`` for
    the understander, and ``model=`` (an LLM understander instead of the heuristic one). An
    unknown name is a ``ConfigError``."""

    model: ChatModel | GenerateFn | None
    glossary: Mapping[str, str | Sequence[str]] | None
    config: RetrievalLoopConfig
    max_iterations: int
    min_new_chunks_per_iter: int
    top_k: int
    improvement_threshold: float | None
    allow_route_switch: bool
    follow_links: int
    on_error: Literal["raise", "stop"]
    direct_first: bool
    budget: Budget | None


RefineQuery = Callable[
    [str, list[RetrievalIteration], int],
    "str | list[str] | Awaitable[str | list[str] | None] | None",
]
ShouldContinue = Callable[[list[RetrievalIteration]], "bool | Awaitable[bool]"]


class RetrievalRunOptions(TypedDict, total=False):
    """What one :meth:`RetrievalLoop.run <ragloop.RetrievalLoop.run>` (``arun``, ``astream``)
    may be given besides query and budget: the caller's ``refine_query`` and
    ``should_continue`` callbacks and its ``sub_queries``. An unknown name is a
    ``ConfigError``."""

    refine_query: RefineQuery | None
    should_continue: ShouldContinue | None
    sub_queries: Sequence[str] | None


# -- AgentLoop -----------------------------------------------------------------------------------


class AgentLoopOptions(TypedDict, total=False):
    """The keyword options of :meth:`AgentLoop.offline <ragloop.AgentLoop.offline>`: the
    keyword arguments of :class:`~ragloop.AgentLoop`, and ``model=`` (the model that drives
    instead of the offline controller). An unknown name is a ``ConfigError``."""

    model: ChatModel | ChatFn | None
    collections: str | Sequence[str] | None
    answerer: ChatModel | ChatFn | None
    max_iterations: int
    chunk_cap: int
    fallback_synthesis: bool
    synthesizer: Synthesizer | None
    tools: Sequence[Tool | str] | None
    system_prompt: str | SystemPromptFn | None
    budget: Budget | None
    max_tool_calls_per_turn: int
    search_opts: Mapping[str, Any] | None
    max_tokens: int | Mapping[str, int | None] | None
    evaluator: Evaluator | None
    target_precision: float | None
    calibration: Calibration | str | os.PathLike[str] | None

"""Bounded model calls: how long a reply may be, what a prompt left out, and the record of
every call a run made.

- :data:`DEFAULT_MAX_TOKENS`: the reply bound each role asks for unless configured (a verdict
  needs far fewer tokens than an answer).
- :func:`reply_bound`: inside the block, a model call asks for at most that many reply tokens.
  The HTTP providers send it in their own field (``max_tokens``, ``max_completion_tokens``),
  never above the model's own ``max_tokens``; the testing fakes record it. A chat model of
  your own reads it with :func:`requested_max_tokens`.
- :class:`PromptFit`: what fitting a prompt to the model's context window left out.
- :class:`LLMCall`: one model call of a run (role, bound, finish reason, tokens, fit), collected
  into the engines' traces by :func:`collect_calls` and into their results' ``llm_calls`` by
  :func:`with_llm_calls`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from pydantic import BaseModel, Field

from ragloop.core.errors import ConfigError

# Reply bounds per role, in tokens. Each leaves room for a verbose model's JSON and prose (the
# replies asked for are a fraction of this); a reasoning model that spends reply tokens on
# hidden reasoning needs more, set per component or per model.
DEFAULT_MAX_TOKENS: dict[str, int] = {
    "generator": 512,  # a short cited answer and a confidence
    "evaluator": 256,  # two booleans, a score and a one-sentence reason
    "reformulator": 256,  # a strategy, a few queries and a reason
    "understander": 384,  # a rewrite, parts, a shape and a short passage
    "grounder": 1024,  # a verdict per claim of the answer
    "controller": 1024,  # tool calls, or the answer
    "answerer": 1024,  # the final answer
    "synthesizer": 1024,  # the fallback answer
}
# A model call that names no role (a direct ask through ragloop.observability.llm).
FALLBACK_MAX_TOKENS = 1024

_bound: ContextVar[int | None] = ContextVar("ragloop_reply_bound", default=None)


def default_max_tokens(role: str) -> int:
    """The reply bound of ``role`` (:data:`DEFAULT_MAX_TOKENS`, else 1024)."""
    return DEFAULT_MAX_TOKENS.get(role, FALLBACK_MAX_TOKENS)


def check_max_tokens(value: object, name: str = "max_tokens") -> int | None:
    """``value`` if it is None or an integer >= 1; raises ``ConfigError`` naming ``name``."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(name, f"must be an integer >= 1 or None, got {value!r}")
    return value


@contextmanager
def reply_bound(max_tokens: int | None) -> Iterator[None]:
    """Inside the block, model calls ask for at most ``max_tokens`` reply tokens (None: no
    bound of the call's own; the model's ``max_tokens`` still applies)."""
    token = _bound.set(max_tokens)
    try:
        yield
    finally:
        _bound.reset(token)


def requested_max_tokens() -> int | None:
    """The reply bound of the model call in progress (see :func:`reply_bound`), or None."""
    return _bound.get()


def effective_max_tokens(requested: int | None, model_cap: int | None) -> int | None:
    """The bound to send: the smaller of the call's and the model's, whichever are set."""
    bounds = [b for b in (requested, model_cap) if b is not None]
    return min(bounds) if bounds else None


class PromptFit(BaseModel):
    """What fitting a prompt to a context window did.

    ``context_window`` is the window fitted to (None: unknown, nothing was cut);
    ``reply_tokens`` the room kept for the reply; ``prompt_tokens`` the prompt's estimated size.
    ``chunks_dropped`` counts retrieved chunks left out (always the lowest-ranked),
    ``chunks_cut`` those whose text was shortened, ``history_dropped`` earlier attempts or
    messages left out (the oldest first), and ``notes`` says all of it in words. ``refit`` is
    True when the server's context-overflow error named the real sizes and the prompt was
    fitted again.
    """

    context_window: int | None = None
    reply_tokens: int | None = None
    prompt_tokens: int = Field(default=0, ge=0)
    chunks_kept: int = Field(default=0, ge=0)
    chunks_dropped: int = Field(default=0, ge=0)
    chunks_cut: int = Field(default=0, ge=0)
    history_dropped: int = Field(default=0, ge=0)
    notes: list[str] = Field(default_factory=list)
    refit: bool = False

    @property
    def omitted(self) -> bool:
        """True when anything was left out or cut."""
        return bool(self.chunks_dropped or self.chunks_cut or self.history_dropped or self.notes)


class LLMCall(BaseModel):
    """One model call a run made: who made it, the bound it asked for, how the reply ended.

    ``role`` names the caller (``generator``, ``evaluator``, ``controller``, ...); ``model`` the
    model; ``max_tokens`` the reply bound asked for (None: unbounded by ragloop);
    ``finish_reason`` as the model said (``"length"``: cut by the bound); ``input_tokens`` and
    ``output_tokens`` when the model reported usage; ``fit`` what fitting the prompt to the
    context window left out (None when the caller did not fit it).
    """

    role: str
    model: str = ""
    max_tokens: int | None = None
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    fit: PromptFit | None = None

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


_collectors: ContextVar[tuple[list[LLMCall], ...]] = ContextVar("ragloop_llm_calls", default=())


@contextmanager
def collect_calls() -> Iterator[list[LLMCall]]:
    """Inside the block, every model call recorded with :func:`record_call` is appended to the
    list yielded (and to the lists of enclosing blocks, so a loop used inside another loop
    shows its calls in both traces)."""
    calls: list[LLMCall] = []
    token = _collectors.set((*_collectors.get(), calls))
    try:
        yield calls
    finally:
        _collectors.reset(token)


def calls_so_far() -> int:
    """How many model calls the innermost :func:`collect_calls` block holds (0 outside one):
    inside an engine's run, the run's own calls so far."""
    collectors = _collectors.get()
    return len(collectors[-1]) if collectors else 0


def record_call(call: LLMCall) -> None:
    """Add ``call`` to every active :func:`collect_calls` block (no-op outside them)."""
    for calls in _collectors.get():
        calls.append(call)


Result = TypeVar("Result", bound=BaseModel)


async def with_llm_calls(run: Awaitable[Result]) -> Result:
    """The result of ``run`` (an engine's), its ``llm_calls`` the model calls made meanwhile."""
    with collect_calls() as made:
        result = await run
    return result.model_copy(update={"llm_calls": made})

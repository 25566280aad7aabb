"""Grounding a finished AgentLoop run: score its answer, then attribute each source to the
search that first returned it (the Agent GPA pattern, at the end of the loop)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ragloop.core.calls import call, has_method, method, run_sync
from ragloop.core.errors import ComponentError
from ragloop.core.protocols import Grounder
from ragloop.core.records.agent import AgentResult, Grounding
from ragloop.observability.events import EventKind
from ragloop.observability.run import RunTelemetry

logger = logging.getLogger("ragloop")

GrounderFn = Callable[..., "Grounding | Awaitable[Grounding]"]


async def aground(result: AgentResult, *, grounder: Grounder | GrounderFn) -> AgentResult:
    """The result with ``grounding`` set: the answer scored against every chunk the controller
    was shown, each source tagged with the search that first returned it.

    ``grounder`` has ``ground(answer, chunks, **opts)`` (or ``aground``), or is such a
    function; it gets ``question=`` too. The result comes back unchanged when there is no
    answer or no chunk was shown, and when the grounder fails (logged on the ``ragloop``
    logger and emitted as a ``grounding`` event with an ``error``).
    """
    if has_method(grounder, "ground"):
        score: Callable[..., Any] = method(grounder, "ground", "grounder")
    elif callable(grounder):
        score = grounder
    else:
        raise TypeError(f"grounder must have ground() or be a function, got {type(grounder)}")
    answer = result.answer
    if answer is None or not answer.strip() or not result.shown_chunks:
        return result
    telemetry = RunTelemetry("agent", run_id=result.run_id)
    try:
        grounding = await call(score, answer, list(result.shown_chunks), question=result.question)
        if not isinstance(grounding, Grounding):
            raise ComponentError(
                f"grounder returned {type(grounding).__name__}; expected ragloop.Grounding"
            )
    except Exception as error:
        logger.warning("grounding failed; the result stays ungrounded: %s", error, exc_info=True)
        failure = f"{type(error).__name__}: {error}"
        telemetry.event(EventKind.GROUNDING, attributes={"error": failure})
        return result
    grounding = grounding.attributed(result.tool_history)
    telemetry.event(
        EventKind.GROUNDING,
        attributes={
            "grounder": grounding.grounder or type(grounder).__name__,
            "score": grounding.score,
            "faithful_span_count": len(grounding.faithful_spans),
            "hallucinated_span_count": len(grounding.hallucinated_spans),
        },
    )
    return result.model_copy(update={"grounding": grounding})


def ground(result: AgentResult, *, grounder: Grounder | GrounderFn) -> AgentResult:
    """Sync :func:`aground`."""
    return run_sync(lambda: aground(result, grounder=grounder))

"""The one switch for content capture, shared by events, logs and spans.

Queries, chunk text, prompts, answers and tool arguments/results stay out of telemetry (logs,
spans, and listeners that did not choose, see ``listen(content=...)``) unless capture is
enabled, by ``RAGLOOP_TRACE_CONTENT=1`` in the environment or by :func:`set_trace_content`
(which wins over the environment until reset with ``None``). A local trace
(:class:`~ragloop.observability.traces.TraceRecorder`) chooses for itself: content by default.
"""

from __future__ import annotations

import os

CONTENT_ENV = "RAGLOOP_TRACE_CONTENT"
_TRUE = {"1", "true", "yes", "on"}

_override: bool | None = None


def set_trace_content(enabled: bool | None) -> None:
    """Capture content in events, logs and spans (True), never (False), or as the
    ``RAGLOOP_TRACE_CONTENT`` environment variable says (None, the default)."""
    global _override
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True, False or None, got {enabled!r}")
    _override = enabled


def trace_content_enabled() -> bool:
    """Whether content goes into telemetry now."""
    if _override is not None:
        return _override
    return os.environ.get(CONTENT_ENV, "").strip().lower() in _TRUE

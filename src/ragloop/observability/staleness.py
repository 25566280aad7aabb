"""Which stored answers rest on documents that have changed since.

A run's ``run_finished`` event lists the citations of its answer, each with the collection and
version (the content hash) of the document its chunk came from (:class:`~ragloop.components.
citations.Citation`); its :class:`TraceRecord` keeps them as ``cited``, and
:func:`stale_sources` compares them with the documents as they are now (the content hash of a
(collection, source), as :meth:`KnowledgeBase.document_version
<ragloop.KnowledgeBase.document_version>` gives it): a cited document whose hash differs was
edited, one that is gone was removed, and the run's answer is *stale*. A citation that says
no version (a retriever that is not a knowledge base, a trace written before versions were
recorded) cannot be judged and never makes a run stale. A run that ``ragloop traces replay``
asked again is answered by its replay (:func:`replayed`) and is not listed as stale any more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Literal

from pydantic import BaseModel

from ragloop.observability.traces import TraceRecord

VersionOf = Callable[[str, str], str | None]  # (collection, source) -> content hash, or None
RUNS_SCANNED = 10_000  # the newest stored runs a search through them looks at
REPLAY_OF = "replay_of"  # a replayed run's meta: the id of the run it asked again


class StaleSource(BaseModel):
    """A cited document that is no longer the version the answer read: ``edited`` (its
    ``current`` version differs) or ``removed`` (no such document now)."""

    collection: str
    source: str
    cited: str
    current: str | None
    change: Literal["edited", "removed"]


def stale_sources(record: TraceRecord, version_of: VersionOf) -> list[StaleSource]:
    """The run's cited documents that have been edited or removed since it ran."""
    stale = []
    for cited in record.cited:
        now = version_of(cited.collection, cited.source)
        if now == cited.version:
            continue
        stale.append(
            StaleSource(
                collection=cited.collection,
                source=cited.source,
                cited=cited.version,
                current=now,
                change="removed" if now is None else "edited",
            )
        )
    return stale


def replayed(records: Iterable[TraceRecord]) -> set[str]:
    """The ids of the runs that a run among ``records`` replayed (``ragloop traces replay``
    stores each replay with the id of the run it asked again)."""
    return {str(r.meta[REPLAY_OF]) for r in records if r.meta.get(REPLAY_OF)}


def stale_runs(
    records: Iterable[TraceRecord], version_of: VersionOf
) -> Iterator[tuple[TraceRecord, list[StaleSource]]]:
    """The runs among ``records`` that are stale, each with what changed, in their order; a
    run replayed since (its replay among ``records``) is answered by its replay, and left
    out (the replay is listed in its place if it is stale itself)."""
    records = list(records)
    answered = replayed(records)
    for record in records:
        if record.id in answered:
            continue
        if stale := stale_sources(record, version_of):
            yield record, stale

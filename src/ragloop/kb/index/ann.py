"""Approximate vector search for large knowledge bases: an HNSW graph over int8-quantised
vectors (usearch) proposes candidates, and their exact float32 scores rank them.

Below :data:`MIN_VECTORS` vectors the SQLite store scans every vector exactly (a few
milliseconds at 100,000). Above it, and when ``usearch`` is installed (``pip install
ragloop[ann]``), dense search asks the graph for :data:`CANDIDATES` candidates and scores them
exactly, so the ranking is exact among them and recall@10 against the exact scan stays above
0.98 (BENCHMARKS.md, measured on MiniLM vectors). Chosen over hnswlib and faiss-cpu by
measurement: same recall and speed on real vectors, int8 storage (a quarter of float32; hnswlib
keeps float32), a small wheel, and a saved graph that is memory-mapped rather than read.

The graph's keys are chunk row numbers, which the store never gives twice, so a key names one
vector for good. The graph is built at the end of an ingest or ``embed`` (about 10 minutes at
1,000,000 vectors on 2 cores, with progress), not by the first search, and saved beside the
knowledge base for that state of it (``kb.sqlite-hnsw-<state>.usearch``): every process, the one
that built it included, maps it instead of holding it. After a later write the graph of the
earlier state is extended with the new vectors; the vectors of deleted chunks stay in it as
waypoints, left out of the candidates, until they are :data:`STALE_SHARE` of it and it is built
again. Removing them from the graph (usearch's ``remove``) was not used: with removed entries,
listing the graph's keys corrupted the process's memory (usearch 2.25).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ragloop.kb.index import saved_arrays

logger = logging.getLogger("ragloop")

MIN_VECTORS = 200_000  # below this, the exact scan is fast enough (BENCHMARKS.md)
CANDIDATES = 100  # scored exactly for each query (at least 4 x top_k)
CONNECTIVITY = 16
EXPANSION_ADD = 128
# the graph's search breadth, which decides recall (the candidates' count barely does): on
# 250,000 chunks of MiniLM-like vectors recall@10 against the exact scan was 0.989 at 1,024,
# 0.992 at 1,536, 0.995 at 2,048 and 0.997 at 3,072 (7.0, 9.2, 12.3 and 15.5 ms a search);
# the misses about double with every fourfold growth (1,000,000 chunks: 0.979 at 1,024)
EXPANSION_SEARCH = 2048
STALE_SHARE = 0.25  # deleted chunks' vectors a graph may hold before it is built again
ADD_BLOCK = 16_384  # vectors converted to rows and added at a time (progress is told after each)

GraphProgress = Callable[[int, int], None]  # (vectors added to the graph, vectors to add)


def available() -> bool:
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


class ApproximateIndex:
    """The HNSW graph of a dense index, keyed by chunk row numbers (``pks``)."""

    def __init__(self, graph: Any, *, mapped: bool = False) -> None:
        self.graph = graph
        self.mapped = mapped  # a saved graph mapped from its file cannot take new vectors

    def __len__(self) -> int:
        return len(self.graph)

    @classmethod
    def build(
        cls,
        pks: npt.NDArray[np.int64],
        columns: npt.NDArray[np.float32],
        on_progress: GraphProgress | None = None,
    ) -> ApproximateIndex:
        from usearch.index import Index

        graph = Index(
            ndim=columns.shape[0],
            metric="cos",
            dtype="i8",
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )
        index = cls(graph)
        index.add(np.arange(len(pks)), pks, columns, on_progress)
        return index

    def missing(self, pks: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
        """Positions of the ``pks`` the graph does not hold."""
        if not len(pks):
            return np.zeros(0, dtype=np.intp)
        held = np.asarray(self.graph.contains(pks.astype(np.uint64)), dtype=bool)
        return np.flatnonzero(~held)

    def stale(self, live: int) -> bool:
        """Whether the graph, holding ``live`` vectors of chunks still stored, holds too many of
        deleted ones to be extended rather than built again."""
        return len(self) - live > STALE_SHARE * len(self)

    def add(
        self,
        positions: npt.NDArray[np.intp],
        pks: npt.NDArray[np.int64],
        columns: npt.NDArray[np.float32],
        on_progress: GraphProgress | None = None,
    ) -> None:
        """Add the vectors at ``positions`` of ``columns`` (one column per chunk of ``pks``),
        a block at a time, telling ``on_progress`` after each."""
        if self.mapped and len(positions):
            raise ValueError("a graph mapped from its file takes no vectors: copy() it first")
        if on_progress is not None:
            on_progress(0, len(positions))
        for start in range(0, len(positions), ADD_BLOCK):
            block = positions[start : start + ADD_BLOCK]
            rows = np.ascontiguousarray(columns[:, block].T)
            self.graph.add(pks[block].astype(np.uint64), rows, threads=0)
            if on_progress is not None:
                on_progress(start + len(block), len(positions))

    def copy(self) -> ApproximateIndex:
        """The graph in memory, to extend while searches may still read this one."""
        return ApproximateIndex(self.graph.copy())

    def candidates(
        self, query: npt.NDArray[np.float32], count: int, pks: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.intp]:
        """Positions in ``pks`` (ascending) of about ``count`` vectors nearest to ``query``;
        keys of deleted chunks are left out."""
        found = np.asarray(self.graph.search(query, count, threads=1).keys, dtype=np.int64)
        positions = np.searchsorted(pks, found)
        inside = positions < len(pks)
        positions = positions[inside]
        held: npt.NDArray[np.intp] = positions[pks[positions] == found[inside]]
        return held

    # -- the saved graph -------------------------------------------------------------------------
    @staticmethod
    def path(store: Path, state: str) -> Path:
        return store.with_name(f"{store.name}-hnsw-{state}.usearch")

    @classmethod
    def load(
        cls, store: Path, state: str, pks: npt.NDArray[np.int64], dimension: int
    ) -> ApproximateIndex | None:
        """The graph saved for this state of the store, memory-mapped; None when there is none
        or it does not hold these chunks' vectors."""
        found = cls._restore(cls.path(store, state), view=True)
        if found is None or found.graph.ndim != dimension or found.missing(pks).size:
            return None
        return found

    @classmethod
    def latest(cls, store: Path, dimension: int) -> ApproximateIndex | None:
        """The most recently saved graph of any state, read into memory (to be extended)."""
        saved = sorted(
            store.parent.glob(f"{store.name}-hnsw-*.usearch"), key=_modified, reverse=True
        )
        for path in saved:
            found = cls._restore(path, view=False)
            if found is not None and found.graph.ndim == dimension:
                return found
        return None

    @classmethod
    def _restore(cls, path: Path, *, view: bool) -> ApproximateIndex | None:
        from usearch.index import Index

        if not path.exists():
            return None
        try:
            graph = Index.restore(str(path), view=view, expansion_search=EXPANSION_SEARCH)
        except Exception:  # a damaged file is built again, never trusted
            logger.warning("ignoring the unreadable vector graph %s", path, exc_info=True)
            return None
        return None if graph is None else cls(graph, mapped=view)

    def save(self, store: Path, state: str) -> bool:
        """Save beside the store (written aside, flushed, then renamed: a reader never sees
        half a file) and remove the graphs of earlier states. False when it was not saved."""
        path = self.path(store, state)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            self.graph.save(str(partial))
            with open(partial, "rb+") as written:  # on the disk before the name points at it
                os.fsync(written.fileno())
            os.replace(partial, path)
            saved_arrays.sync_folder(path.parent)
        except (OSError, RuntimeError) as error:  # a full disk, a read-only folder: built again
            saved_arrays.could_not_save(path, error)
            partial.unlink(missing_ok=True)
            return False
        # graphs of other states, and the position-keyed ones of earlier releases
        for pattern in ("hnsw-*.usearch", "ann-*.usearch"):
            for old in store.parent.glob(f"{store.name}-{pattern}"):
                if old != path:
                    old.unlink(missing_ok=True)
        return True


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0

"""Approximate vector search for large knowledge bases: an HNSW graph over int8-quantised
vectors (usearch) proposes candidates, and their exact float32 scores rank them.

Below :data:`MIN_VECTORS` vectors the SQLite store scans every vector exactly (a few
milliseconds at 100,000). Above it, and when ``usearch`` is installed (``pip install
ragloop[ann]``), dense search asks the graph for :data:`CANDIDATES` candidates and scores them
exactly, so the ranking is exact among them and recall@10 against the exact scan stays above
0.98 (BENCHMARKS.md, measured on MiniLM vectors). Chosen over hnswlib and faiss-cpu by
measurement: same recall and speed on real vectors, int8 storage (a quarter of float32; hnswlib
keeps float32), a small wheel, and a saved graph that is memory-mapped rather than read.

The graph is built when the dense index is loaded (about 10 minutes at 1,000,000 vectors on 2
cores), extended when chunks were only appended since, and saved beside the knowledge base
(``kb.sqlite-ann-<count>-<fingerprint>.usearch``), where every process, the one that built it
included, maps it instead of holding it. The fingerprint covers the vectors at fixed
positions, so a graph of other vectors is never used.
"""

from __future__ import annotations

import logging
import os
import zlib
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
_ADD_BLOCK = 65_536  # vectors converted to rows and added at a time
_SAMPLES = 64  # vectors the fingerprint covers


def available() -> bool:
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


class ApproximateIndex:
    """The HNSW graph of a dense index: keys are positions in its columns."""

    def __init__(self, graph: Any, *, mapped: bool = False) -> None:
        self.graph = graph
        self.mapped = mapped  # a saved graph mapped from its file cannot take new vectors

    def __len__(self) -> int:
        return len(self.graph)

    @classmethod
    def build(cls, columns: npt.NDArray[np.float32]) -> ApproximateIndex:
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
        index.extend(columns)
        return index

    def extend(self, columns: npt.NDArray[np.float32]) -> None:
        """Add the columns past the ones already in the graph."""
        if self.mapped and len(self) < columns.shape[1]:
            self.graph, self.mapped = self.graph.copy(), False
        for start in range(len(self), columns.shape[1], _ADD_BLOCK):
            end = min(start + _ADD_BLOCK, columns.shape[1])
            rows = np.ascontiguousarray(columns[:, start:end].T)
            self.graph.add(np.arange(start, end, dtype=np.uint64), rows, threads=0)

    def candidates(self, query: npt.NDArray[np.float32], count: int) -> npt.NDArray[np.intp]:
        """Positions of about ``count`` vectors nearest to ``query``."""
        found = self.graph.search(query, count, threads=1)
        return np.asarray(found.keys, dtype=np.intp)

    # -- the saved graph -------------------------------------------------------------------------
    @staticmethod
    def path(store: Path, columns: npt.NDArray[np.float32]) -> Path:
        return store.with_name(
            f"{store.name}-ann-{columns.shape[1]}-{fingerprint(columns):08x}.usearch"
        )

    @classmethod
    def load(cls, store: Path, columns: npt.NDArray[np.float32]) -> ApproximateIndex | None:
        """The saved graph of exactly these vectors, memory-mapped; None when there is none
        (or it cannot be read)."""
        from usearch.index import Index

        path = cls.path(store, columns)
        if not path.exists():
            return None
        try:
            graph = Index.restore(str(path), view=True, expansion_search=EXPANSION_SEARCH)
        except Exception:  # a damaged file is built again, never trusted
            logger.warning("ignoring the unreadable vector graph %s", path, exc_info=True)
            return None
        if graph is None or len(graph) != columns.shape[1] or graph.ndim != columns.shape[0]:
            return None
        return cls(graph, mapped=True)

    def save(self, store: Path, columns: npt.NDArray[np.float32]) -> None:
        """Save beside the store (written aside, flushed, then renamed: a reader never sees
        half a file) and remove the graphs of earlier vectors."""
        path = self.path(store, columns)
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
            return
        for old in store.parent.glob(f"{store.name}-ann-*.usearch"):
            if old != path:
                old.unlink(missing_ok=True)


def fingerprint(columns: npt.NDArray[np.float32]) -> int:
    """CRC-32 of the vectors at ``_SAMPLES`` evenly spaced positions and of their count."""
    count = columns.shape[1]
    positions = np.unique(np.linspace(0, max(count - 1, 0), _SAMPLES).astype(np.intp))
    sample = np.ascontiguousarray(columns[:, positions]) if count else columns
    return zlib.crc32(sample.tobytes(), zlib.crc32(str(columns.shape).encode()))

"""What the in-memory indexes (keyword and dense) share: which chunk each position of an
index holds, their copies saved beside the file (:mod:`ragloop.kb.index.saved_arrays`), and a
scope as a mask over positions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ragloop.core.records import Scope
from ragloop.kb.index import saved_arrays
from ragloop.kb.stores.sqlite.database import Database


@dataclass
class IndexRows:
    """Which chunk each position of an index holds: its row pk and its collection (as a
    number into ``names``: one int32 a chunk, whatever the name's length)."""

    pks: npt.NDArray[np.int64]
    collections: npt.NDArray[np.int32]
    names: list[str]

    @classmethod
    def read(cls, parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]],
             names: dict[str, int]) -> IndexRows:  # fmt: skip
        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int32), list(names))
        pks, collections = (np.concatenate(arrays) for arrays in zip(*parts, strict=True))
        return cls(pks, collections, list(names))


def rows_problem(rows: IndexRows) -> str:
    """What is wrong with an index's rows read from a saved file ("" when nothing): row pks are
    in increasing order, one collection number each, naming a collection."""
    if len(rows.collections) != len(rows.pks):
        return f"{len(rows.pks)} rows but {len(rows.collections)} collection numbers"
    if rows.pks.dtype != np.int64 or (len(rows.pks) > 1 and not (np.diff(rows.pks) > 0).all()):
        return "its row numbers are not in increasing order"
    codes = rows.collections
    if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= len(rows.names)):
        return "its collection numbers name no collection"
    return ""


def row_block(
    rows: list[Any], names: dict[str, int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """The pks and collection numbers of rows that start (pk, collection, ...)."""
    pks = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    codes = np.fromiter(
        (names.setdefault(row[1], len(names)) for row in rows), dtype=np.int32, count=len(rows)
    )
    return pks, codes


class SavedIndexes(Database):
    """The saving, loading and scoping the keyword and dense indexes share."""

    def _saved_path(self, kind: str, state: str | None) -> Path | None:
        """Where the index of ``kind`` for this state of the file is saved (None: a file
        without state tokens, which only an older ragloop wrote)."""
        if state is None:
            return None
        return self.path.with_name(f"{self.path.name}-{kind}-{state}.arrays")

    def _save(
        self,
        path: Path | None,
        kind: str,
        rows: IndexRows,
        arrays: dict[str, npt.NDArray[Any]],
        info: dict[str, Any],
    ) -> bool:
        """Save an index's rows and ``arrays`` at ``path`` (beside the file, for this state of
        it) and remove the ones saved for earlier states. False when it was not saved."""
        if path is None or self.read_only:
            return False
        arrays = {"pks": rows.pks, "collections": rows.collections, **arrays}
        if not saved_arrays.save(path, arrays, {**info, "names": rows.names}):
            return False
        saved_arrays.remove_others(path, f"{self.path.name}-{kind}-*.arrays")
        return True

    def _load_saved(
        self, path: Path | None
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any], IndexRows] | None:
        """The arrays, info and rows :meth:`_save` wrote at ``path``; None when there is no
        such file or its rows do not hold together (said in a warning: it is built again)."""
        saved = saved_arrays.load(path) if path else None
        if path is None or saved is None:
            return None
        arrays, info = saved
        try:
            rows = IndexRows(arrays["pks"], arrays["collections"], list(info["names"]))
        except (KeyError, TypeError):
            saved_arrays.damaged(path, "its rows are missing")
            return None
        problem = rows_problem(rows)
        if problem:
            saved_arrays.damaged(path, problem)
            return None
        return arrays, info, rows

    def _scope_mask(self, rows: IndexRows, scope: Scope) -> npt.NDArray[np.bool_] | None:
        """Which rows of an index the scope admits (None: all)."""
        if scope.collections is None and not scope.filters:
            return None
        mask = None
        if scope.collections is not None:
            wanted = [code for code, name in enumerate(rows.names) if name in scope.collections]
            mask = np.isin(rows.collections, wanted)
        return self._filters_mask(rows, scope, mask) if scope.filters else mask

    def _filters_mask(
        self, rows: IndexRows, scope: Scope, mask: npt.NDArray[np.bool_] | None
    ) -> npt.NDArray[np.bool_]:
        """The rows of ``mask`` (None: all) the scope's filters admit."""
        pks = rows.pks
        # a copy: the mask given may be one a keyword index keeps for its scope
        mask = np.ones(len(pks), dtype=bool) if mask is None else mask.copy()
        where, params = self._scope_sql(scope)
        allowed = [
            row[0]
            for row in self._conn().execute(
                f"SELECT c.pk FROM chunks c JOIN documents d ON d.id = c.document_id WHERE {where}",
                params,
            )
        ]
        mask &= np.isin(pks, np.array(allowed, dtype=np.int64))
        return mask

"""Where things are, as pure rules of a location (no settings read): whether a knowledge base's
location is a PostgreSQL URL, and the name of the trace file beside a knowledge base's file.
The defaults that depend on the settings (the knowledge base when none is named, the traces of
a PostgreSQL one) are in :mod:`ragloop.config`."""

from __future__ import annotations

import os
from pathlib import Path


def is_postgres_dsn(location: str) -> bool:
    """Whether a knowledge base's location names a PostgreSQL database rather than a file."""
    return location.startswith(("postgresql://", "postgres://"))


def traces_path_for(kb_path: str | os.PathLike[str]) -> Path:
    """The trace file beside a knowledge base: ``kb.sqlite`` -> ``kb.traces.sqlite``."""
    path = Path(kb_path)
    return path.with_name(f"{path.stem}.traces.sqlite")

"""The Python 3.11 documentation corpus and its questions, read from ../shared/data.

The tarball is unpacked once into benchmarks/.cache/pydocs311 (checked against its size and
sha256 from the data's README), never into the repository.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TARBALL = DATA / "pydocs311" / "pydocs311-html.tar.gz"
QUESTIONS = DATA / "pydocs311_qa" / "dev.jsonl"
SHA256 = "2ae53cc98cb962afb86e256da5a93107fcc41b8dc643abfa530978fff1f5e984"
CACHE = Path(__file__).resolve().parent / ".cache"
FOLDERS = ("library", "tutorial", "howto", "faq", "reference")


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    kind: str
    gold_files: tuple[str, ...]


def corpus() -> Path:
    """The folder holding the five corpus folders (library/, tutorial/, ...)."""
    target = CACHE / "pydocs311"
    stamp = target / ".unpacked"
    if stamp.exists() and stamp.read_text() == SHA256:
        return target / "corpus"
    digest = hashlib.sha256(TARBALL.read_bytes()).hexdigest()
    if digest != SHA256:
        raise RuntimeError(f"{TARBALL} has sha256 {digest}, expected {SHA256}")
    with tarfile.open(TARBALL) as archive:
        members = [m for m in archive.getmembers() if m.name.split("/")[0] in FOLDERS]
        archive.extractall(target / "corpus", members=members, filter="data")
    stamp.write_text(SHA256)
    return target / "corpus"


def questions(*, answerable: bool = True) -> list[Question]:
    out = []
    with QUESTIONS.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if answerable and not row["answerable"]:
                continue
            out.append(Question(row["id"], row["question"], row["kind"], tuple(row["gold_files"])))
    return out


def page_at(sources: list[str], gold: tuple[str, ...], k: int) -> float:
    """1.0 when a gold page is among the first ``k`` distinct pages, else 0.0."""
    pages = list(dict.fromkeys(sources))[:k]
    return float(any(page in gold for page in pages))

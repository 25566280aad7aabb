"""Issue 17, item 3: ingesting a file costs time linear in its size and bounded memory.

Reported: HTML with 10,000 ``<p>`` in 110 kB took 72 s, 16k nested divs 32 s, 40k unclosed
``<p>`` over 120 s; a 2.9 MB CSV of 100k short rows used 1.24 GB and 87 s, a 24.8 MB CSV
11.7 GB, a 10 MB JSON list about 6 GB. The HTML reader is one pass (issue 16); what remained
quadratic was the link index (every record titled "item N" scanned every other name starting
with "item"), and the memory was every chunk's vector held as Python floats at once.

Cost is measured as work, not time: the number of Python and C function calls a run makes
(``sys.setprofile``), which is deterministic. A linear run on 4x the input makes about 4x the
calls; a quadratic one 16x. Memory is tracemalloc's peak. The full sizes of the report run with
``-m fuzz``.
"""

from __future__ import annotations

import json
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from ragloop import KnowledgeBase
from ragloop.kb.ingest.chunking import chunk_document
from ragloop.kb.readers import data as data_readers
from ragloop.kb.readers.html import read_html


def work(run: Callable[[], object]) -> int:
    """The function calls ``run`` makes."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def paragraphs(n: int) -> str:
    return "<html><body>" + "".join(f"<p>Paragraph {i} of text.</p>" for i in range(n)) + "</body>"


def nested_divs(n: int) -> str:
    return "<html><body>" + "<div>" * n + "deep text" + "</div>" * n + "</body></html>"


def unclosed_paragraphs(n: int) -> str:
    return "<html><body>" + "".join(f"<p>Paragraph {i}" for i in range(n)) + "</body></html>"


def csv_rows(n: int) -> str:
    return "id,name,value\n" + "".join(f"{i},item {i},{i * 7}\n" for i in range(n))


def json_list(n: int) -> str:
    return json.dumps(
        [{"id": i, "title": f"item {i}", "text": f"item {i} is here"} for i in range(n)]
    )


def jsonl_lines(n: int) -> str:
    return "".join(
        json.dumps({"id": i, "name": f"item {i}", "text": "here"}) + "\n" for i in range(n)
    )


def _parse_html(text: str) -> None:
    chunk_document(read_html(text, Path("page.html")))


@pytest.mark.parametrize(
    ("make", "n"),
    [(paragraphs, 1000), (nested_divs, 1000), (unclosed_paragraphs, 2000)],
    ids=["paragraphs", "nested-divs", "unclosed-p"],
)
def test_html_costs_linear_work(make, n):
    small = work(lambda: _parse_html(make(n)))
    large = work(lambda: _parse_html(make(4 * n)))
    assert large / small < 5, (small, large)


def _ingest(tmp_path: Path, name: str, text: str) -> KnowledgeBase:
    folder = tmp_path / name.replace(".", "-")
    folder.mkdir(parents=True)
    (folder / name).write_text(text)
    kb = KnowledgeBase(folder / "kb.sqlite", embedder="hash")
    report = kb.ingest(folder / name)
    assert report.added == 1, report.skipped
    return kb


@pytest.mark.parametrize(
    ("name", "make", "n"),
    [
        ("rows.csv", csv_rows, 300),
        ("items.json", json_list, 300),
        ("lines.jsonl", jsonl_lines, 300),
    ],
)
def test_ingesting_records_costs_linear_work(tmp_path, name, make, n):
    small = work(lambda: _ingest(tmp_path / "small", name, make(n)))
    large = work(lambda: _ingest(tmp_path / "large", name, make(4 * n)))
    assert large / small < 5, (small, large)


def test_ingest_memory_is_bounded_per_record(tmp_path):
    """Each record's chunk and vector cost a few kB until written, never 12 kB of Python
    floats (384 of them at 32 bytes) on top."""
    rows = 2500
    tracemalloc.start()
    try:
        _ingest(tmp_path, "rows.csv", csv_rows(rows))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak / rows < 6_000, peak / rows


@pytest.mark.parametrize(
    ("name", "make"),
    [("rows.csv", csv_rows), ("items.json", json_list), ("lines.jsonl", jsonl_lines)],
)
def test_a_file_over_the_record_cap_is_skipped_with_the_reason(tmp_path, monkeypatch, name, make):
    monkeypatch.setattr(data_readers, "MAX_RECORDS", 500)
    path = tmp_path / name
    path.write_text(make(501))
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    report = kb.ingest(path)
    assert report.added == 0
    assert "MAX_RECORDS" in dict(report.skipped)[str(path)]
    path.write_text(make(500))
    assert kb.ingest(path).added == 1


# -- the sizes of the report -------------------------------------------------------------------


@pytest.mark.fuzz
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("paragraphs.html", paragraphs(10_000)),
        ("nested.html", nested_divs(16_000)),
        ("unclosed.html", unclosed_paragraphs(40_000)),
        ("rows.csv", csv_rows(100_000)),
        ("items.json", json_list(100_000)),
    ],
)
def test_the_reported_files_ingest(tmp_path, name, text):
    _ingest(tmp_path, name, text)


@pytest.mark.fuzz
def test_a_25_mb_csv_is_refused_by_the_record_cap_without_growing(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text(csv_rows(1_000_000))
    tracemalloc.start()
    try:
        report = KnowledgeBase(tmp_path / "kb.sqlite", embedder="hash").ingest(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "MAX_RECORDS" in dict(report.skipped)[str(path)]
    assert peak < 1_000_000_000

"""The HTML trace viewer and the local trace (issue 31, item 13): each retrieval hop shows the
chunks its searches found (the count the events give) and the queries it searched (a
decomposed question's parts, not the question); `ragloop ask` keeps the question and answer
in its local trace by default, none with `[traces] content = false`."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from ragloop import Document, KnowledgeBase
from ragloop.cli import main as cli
from ragloop.cli.common import open_traces
from ragloop.observability import set_trace_content
from ragloop.observability.report_html import render_html
from ragloop.observability.trace_reading import trace_steps

QUESTION = "How much does tent 3 weigh and who makes tent 7?"
HOP = re.compile(r"<li class='hop'>hop (\d+): <code>(.*?)</code> (\d+) chunk\(s\)")


@pytest.fixture(autouse=True)
def _clean(no_ragloop_settings):
    set_trace_content(None)


@pytest.fixture
def kb_path(tmp_path):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder="hash") as kb:
        kb.add_documents(
            [
                Document(
                    text=f"Tent model {i} weighs {i} kg.", source=f"t{i}.md", title=f"Tent {i}"
                )
                for i in range(30)
            ]
        )
    return path


def ask(kb_path, *extra: str):
    result = CliRunner().invoke(
        cli, [*extra, "ask", QUESTION, "--kb", str(kb_path), "--engine", "retrieval"]
    )
    assert result.exit_code == 0, result.output
    store = open_traces(str(kb_path))
    try:
        return store.get(store.list(1)[0].id)
    finally:
        store.close()


def test_each_hop_shows_its_chunks_and_the_queries_it_searched(kb_path):
    record = ask(kb_path)
    assert record.content
    assert record.question == QUESTION  # the local trace keeps what was asked and answered
    assert record.answer
    nested = [e for e in record.events if e.run_id != record.id]
    searched = [
        e.attributes["query"] for e in nested if e.kind.value == "search" and e.iteration == 0
    ]
    results = [e.attributes["results_n"] for e in nested if e.kind.value == "iteration"]
    assert len(searched) > 1  # the question was searched as its two parts
    page = render_html(record)
    hops = HOP.findall(page)
    assert hops, page
    number, queries, count = hops[0]
    assert number == "1"
    assert int(count) == results[0] > 0
    assert queries.split(" | ") == searched
    assert queries != QUESTION
    (step,) = [s for s in trace_steps(record) if s.hops]
    assert step.hops[0].chunks
    assert step.hops[0].chunk_count == results[0]
    assert "question not recorded" not in page


def test_traces_content_false_keeps_no_text_in_the_local_trace(kb_path, tmp_path):
    config = tmp_path / "ragloop.toml"
    config.write_text("[traces]\ncontent = false\n", encoding="utf-8")
    record = ask(kb_path, "--config", str(config))
    assert (record.content, record.question, record.answer) == (False, None, None)
    page = render_html(record)
    assert "question not recorded" in page
    assert "tent 3 weigh" not in page
    assert int(HOP.findall(page)[0][2]) > 0  # the structure stays: how many chunks each hop had

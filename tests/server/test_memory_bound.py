"""What a long-running server keeps in memory (issue 58, item 5): it read every finished run's
trace record into its recorder and never let go (RSS 122 MB -> 1.62 GB over 2,800 requests).
Its recorder keeps none (runs are read back from the store); a recorder keeps its newest
``keep``. The RSS over 6,000 requests is benchmarks/bench_soak.py's (BENCHMARKS.md)."""

from __future__ import annotations

import httpx

from ragloop import KnowledgeBase, RAGLoop
from ragloop.observability.traces import TraceRecorder
from tests.server.conftest import PUBLIC, auth


def test_the_server_keeps_no_run_in_memory_and_stores_every_one(server):
    url, service = server
    asked = set()
    for n in range(30):
        body = {"question": f"How much does tent hire cost ({n})?", "engine": "rag"}
        answer = httpx.post(f"{url}/v1/ask", json=body, headers=auth("root"), timeout=60)
        asked.add(answer.json()["run_id"])
    assert len(service.recorder.records) == 0
    assert asked <= {record.id for record in service.traces.list(100)}


def test_a_recorder_keeps_its_newest_records(tmp_path):
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder=None) as kb:
        kb.add_documents(PUBLIC)
        loop = RAGLoop.offline(kb)
        with TraceRecorder(keep=3) as recorder:
            results = [loop.run(f"What does tent hire cost ({n})?") for n in range(5)]
    assert list(recorder.records) == [r.run_id for r in results[-3:]]

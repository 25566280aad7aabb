"""A loop run inside another (a RetrievalLoop serving as a RAGLoop's retriever) is kept in the
outer run's trace, as the hops of the step it served."""

from __future__ import annotations

from ragloop import (
    Document,
    KnowledgeBase,
    RAGLoop,
    TraceRecorder,
    TraceStore,
    set_trace_content,
)
from ragloop.observability.trace_reading import summarize, trace_steps
from ragloop.testing import HashEmbedder


def test_the_hops_of_a_nested_retrieval_loop_are_in_the_outer_trace(tmp_path):
    set_trace_content(True)
    kb = KnowledgeBase.in_memory(embedder=HashEmbedder(64))
    kb.add_documents(
        [
            Document(title="Skylark 2", source="skylark.md", text="The Skylark 2 weighs 1.6 kg."),
            Document(title="Returns", source="returns.md", text="Refunds take 30 days."),
        ]
    )
    store = TraceStore(tmp_path / "traces.sqlite")
    with TraceRecorder(store) as recorder:
        result = RAGLoop.offline(kb, max_iterations=1).run("How much does the Skylark 2 weigh?")
    (record,) = recorder.records.values()  # one trace: the nested run is not a trace of its own
    assert record.id == result.run_id
    engines = {e.engine for e in record.events}
    assert engines == {"rag", "retrieval"}
    (step,) = trace_steps(record)
    assert step.hops
    assert [h.number for h in step.hops] == list(range(1, len(step.hops) + 1))
    assert step.hops[0].queries == [result.query]
    assert step.hop_stops
    assert summarize(record).detail.startswith("after 1 iteration(s)")
    assert trace_steps(store.get(record.id)) == [step]
    kb.close()

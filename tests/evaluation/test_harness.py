"""The harness end to end on a small fixture: one-shot configurations, a function
configuration, comparisons, reports and the chart."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from ragloop import Usage
from ragloop.evaluation.configurations import (
    OneShot,
    RetrievalLoopConfiguration,
    build_knowledge_base,
    make_configuration,
)
from ragloop.evaluation.datasets import EvalDataset, EvalPassage, load_dataset
from ragloop.evaluation.harness import EvalReport, FunctionConfiguration, Outcome, evaluate
from ragloop.evaluation.report import kind_table, markdown_table, recall_chart, significance_table
from ragloop.testing import ScriptedModel

FIXTURES = Path(__file__).parent / "fixtures"


def test_harness_scores_compares_and_reports(tmp_path):
    dataset = load_dataset(FIXTURES / "hotpot_official.json")
    kb = build_knowledge_base(dataset, embedder=None)
    gold_of = {q.question: q.gold for q in dataset.questions}
    seen_questions = []

    def oracle(question: str) -> Outcome:
        seen_questions.append(question)
        return Outcome(
            ranked=list(gold_of[question]),
            answer="the Danube",
            retrieval_calls=3,
            llm_calls=2,
            tokens=100,
            iterations=2,
        )

    report = evaluate(
        dataset,
        [OneShot(kb, "bm25"), FunctionConfiguration("oracle", oracle)],
        ks=(1, 2, 5),
    )
    assert seen_questions == [q.question for q in dataset.questions]  # text only reaches it
    oracle_summary = report.summary("oracle")
    assert oracle_summary.metrics["recall_all@2"] == 1.0
    assert oracle_summary.metrics["em"] == 0.5  # "Danube" right, "yes" wrong
    assert (
        oracle_summary.retrieval_calls,
        oracle_summary.llm_calls,
        oracle_summary.iterations,
    ) == (3, 2, 2)
    assert set(oracle_summary.by_kind) == {"bridge", "comparison"}
    baseline = report.summary("one-shot bm25")
    assert baseline.baseline
    assert baseline.retrieval_calls == 1
    comparison = report.comparison("oracle", "recall_all@5")
    assert comparison.baseline == "one-shot bm25"
    assert 0.0 <= comparison.p_value <= 1.0
    assert EvalReport.model_validate_json(report.model_dump_json()) == report
    json.loads(report.model_dump_json())
    table = markdown_table(report)
    assert "| oracle |" in table
    assert "one-shot bm25 (baseline)" in table
    assert "recall_all@5" in significance_table(report)
    assert "| oracle | 1.000 | 1.000 |" in kind_table(report, "recall_all@2")
    png = recall_chart(report, tmp_path / "chart.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (840, 540)


def test_retrieval_calls_are_counted_by_the_knowledge_base():
    dataset = load_dataset(FIXTURES / "ircot.jsonl")
    kb = build_knowledge_base(dataset, embedder=None)
    assert OneShot(kb, "bm25").run("tent").retrieval_calls == 1
    assert kb.searches == 1
    kb.retriever(mode="bm25").search("tent", limit=2)
    assert kb.searches == 2
    loop = RetrievalLoopConfiguration(kb, max_iterations=2)
    outcome = loop.run("Who founded the shop that sells the Ridgeline tent?")
    assert outcome.retrieval_calls == kb.searches - 2 >= 1
    assert outcome.ranked


def test_titles_can_be_left_out_of_the_index():
    dataset = EvalDataset(
        name="t",
        questions=[],
        passages=[EvalPassage(id="p0", title="Zebra", text="A striped animal of Africa.")],
    )
    with_titles = build_knowledge_base(dataset, embedder=None)
    without = build_knowledge_base(dataset, embedder=None, titles=False)
    assert [c.source for c in with_titles.search("zebra", mode="bm25")] == ["p0"]
    assert without.search("zebra", mode="bm25") == []  # the title was the only mention
    assert without.search("striped", mode="bm25")[0].metadata["title"] == ""


def test_answering_loops_report_answers_evidence_and_their_cost():
    dataset = load_dataset(FIXTURES / "ircot.jsonl")
    kb = build_knowledge_base(dataset, embedder=None)
    question = "Who founded the shop that sells the Ridgeline tent?"
    for engine in ("rag", "agent"):
        before = kb.searches
        outcome = make_configuration(engine, kb, max_iterations=3).run(question)
        assert outcome.retrieval_calls == kb.searches - before >= 2, engine  # two hops
        assert outcome.ranked[:2] == ["p0", "p1"], engine
        assert "Ada Lind" in outcome.answer, engine
        assert "[1]" not in outcome.answer  # citations are stripped for EM and F1
        assert "Sources:" not in outcome.answer
        assert outcome.llm_calls == 0
        assert outcome.iterations >= 1


def test_llm_calls_and_tokens_are_counted_when_a_model_drives():
    dataset = load_dataset(FIXTURES / "ircot.jsonl")
    kb = build_knowledge_base(dataset, embedder=None)
    verdict = json.dumps({"is_grounded": True, "is_complete": True, "score": 0.95, "reason": "ok"})
    answer = json.dumps({"answer": "Ada Lind founded Northfold. [1]", "confidence": 0.9})
    model = ScriptedModel([answer, verdict], usage=Usage(input_tokens=40, output_tokens=10))
    configuration = make_configuration("rag", kb, model=model)
    outcome = configuration.run("Who founded Northfold?")
    assert (outcome.llm_calls, outcome.tokens, outcome.iterations) == (2, 100, 1)
    assert outcome.answer == "Ada Lind founded Northfold."
    assert outcome.ranked[0] == "p1"
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        make_configuration("nope", kb)

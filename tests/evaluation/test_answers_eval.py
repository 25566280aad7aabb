"""The answering loops as selective answerers: the harness's figures, the report, the chart,
and ``ragloop eval --calibrate``, on a small shop corpus with questions it does not answer."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragloop.cli import main
from ragloop.components.calibration import Calibration
from ragloop.components.heuristics.confidence import offline_calibration
from ragloop.evaluation.configurations import build_knowledge_base, make_configuration
from ragloop.evaluation.datasets import DatasetError, load_dataset
from ragloop.evaluation.harness import EvalReport, FunctionConfiguration, Outcome, evaluate
from ragloop.evaluation.report import markdown_table, recall_chart, selective_table
from ragloop.evaluation.selective import Judged, selective_metrics

FIXTURES = Path(__file__).parent / "fixtures"
ANSWERS = FIXTURES / "answers.jsonl"
CORPUS = FIXTURES / "answers_corpus.jsonl"


def test_simple_datasets_mark_the_questions_the_corpus_does_not_answer(tmp_path):
    dataset = load_dataset(ANSWERS, CORPUS)
    unanswerable = [q for q in dataset.questions if not q.answerable]
    assert [q.id for q in unanswerable] == ["u1", "u2", "u3"]
    assert all(q.gold == [] and q.answers == [] for q in unanswerable)
    assert all(q.answerable for q in dataset.questions if q.id.startswith("a"))
    (tmp_path / "odd.jsonl").write_text('{"question": "q", "gold": [], "answerable": "no"}\n')
    with pytest.raises(DatasetError, match="answerable must be true or false"):
        load_dataset(tmp_path / "odd.jsonl", CORPUS)


def test_a_configuration_with_probabilities_is_scored_as_a_selective_answerer():
    dataset = load_dataset(ANSWERS, CORPUS)
    kb = build_knowledge_base(dataset, embedder=None)
    # a made-up answerer: sure of the first two questions (right), of u1 (any answer to it is
    # wrong), unsure of the rest, answering "Oslo" to everything
    chances = {"Who founded Northfold?": 0.9, "What is the price of the Ridgeline tent?": 0.8}

    def answerer(question: str) -> Outcome:
        chance = chances.get(question, 0.2)
        answer = "Ada Lind" if question.startswith("Who founded") else "Oslo"
        return Outcome(ranked=[], answer=answer, probability=chance, confident=chance > 0.5)

    report = evaluate(
        dataset,
        [make_configuration("bm25", kb), FunctionConfiguration("sure", answerer)],
        target_precision=0.7,
    )
    assert report.target_precision == 0.7
    assert report.summary("one-shot bm25").selective is None  # no probability, no figures
    m = report.summary("sure").selective
    assert m is not None
    assert (m.questions, m.unanswerable) == (11, 3)
    assert m.accuracy == pytest.approx(1 / 11)  # Ada Lind only
    assert (m.precision_at_target, m.coverage_at_target) == (0.5, pytest.approx(2 / 11))
    assert m.confident == 2
    assert m.confident_but_wrong == pytest.approx(1 / 11)
    assert (m.refusals, m.refusal_precision, m.refusal_recall) == (9, 1.0, 0.9)
    rows = report.results["sure"]
    assert [r.right for r in rows[:2]] == [True, False]
    assert all(r.right is False for r in rows if r.question_id.startswith("u"))
    # the retrieval metrics leave out the questions with nothing to find
    assert all(r.metrics == {} for r in rows if r.question_id.startswith("u"))
    assert report.summary("one-shot bm25").metrics["recall_all@2"] == 1.0
    assert EvalReport.model_validate_json(report.model_dump_json()) == report
    table = selective_table(report)
    assert "| sure | 11 (3 unanswerable) | 0.091 |" in table
    assert "precision @ 0.7" in table
    assert "one-shot bm25" not in table
    assert "| sure |" in markdown_table(report)


def test_a_dataset_of_unanswerable_questions_is_still_reported():
    dataset = load_dataset(ANSWERS, CORPUS)
    dataset = dataset.model_copy(
        update={"questions": [q for q in dataset.questions if not q.answerable]}
    )
    refuser = FunctionConfiguration(
        "refuser", lambda q: Outcome(ranked=[], answer="", probability=0.1, confident=False)
    )
    report = evaluate(dataset, [refuser])
    m = report.summary("refuser").selective
    assert m is not None
    assert (m.questions, m.unanswerable, m.refusals, m.refusal_precision) == (3, 3, 3, 1.0)
    assert report.summary("refuser").metrics == {}
    assert "| refuser | - | - |" in markdown_table(report)


def test_the_offline_loops_report_their_chance_and_whether_they_stand_by_it(tmp_path):
    dataset = load_dataset(ANSWERS, CORPUS)
    kb = build_knowledge_base(dataset, embedder=None)
    report = evaluate(dataset, [make_configuration(e, kb) for e in ("bm25", "rag", "agent")])
    for name in ("RAGLoop", "AgentLoop"):
        rows = report.results[name]
        assert all(r.probability is not None and r.confident is not None for r in rows), name
        m = report.summary(name).selective
        assert m is not None, name
        assert m.questions == 11, name
        # the figures are those of the per-question results
        answers = [
            Judged(r.probability or 0.0, bool(r.right), r.question_id[0] == "a", r.confident)
            for r in rows
        ]
        assert m == selective_metrics(answers, 0.5), name
        assert 0.0 <= m.aurc <= 1.0
        assert m.curve[-1].coverage == 1.0
        assert m.refusals > 0  # the shop does not say what the Ridgeline costs, ...
        assert m.confident > 0  # ... but it does say who founded it
    rag = report.results["RAGLoop"]
    shipped = offline_calibration()  # the offline loops read the score through it
    assert all(r.probability == shipped.probability(r.score or 0.0) for r in rag)
    assert [r.confident for r in rag] == [r.probability >= 0.8 for r in rag]
    png = recall_chart(report, tmp_path / "chart.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (1560, 540)  # recall and risk-coverage side by side


def _eval(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["eval", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_eval_calibrate_writes_a_calibration_and_shows_it_in_sample_and_cross_validated(
    tmp_path,
):
    code, out = _eval(
        str(ANSWERS),
        "--corpus",
        str(CORPUS),
        "--embedder",
        "none",
        "--kb",
        str(tmp_path / "kb.sqlite"),
        "--engine",
        "bm25",
        "--engine",
        "rag",
        "--json",
        str(tmp_path / "report.json"),
        "--chart",
        str(tmp_path / "chart.png"),
        "--calibrate",
        str(tmp_path / "calibration.json"),
        "--calibration-method",
        "isotonic",
        "--target-precision",
        "0.6",
    )
    assert code == 0, out
    assert "answers: how right when answering, against how often" in out
    assert "precision @ 0.6" in out
    assert "calibration on 11 answers of RAGLoop" in out
    assert "fitted, in-sample" in out
    assert "5-fold cross-validated" in out
    calibration = Calibration.load(tmp_path / "calibration.json")
    assert (calibration.method, calibration.evaluator, calibration.questions) == (
        "isotonic",
        "heuristic",
        11,
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["target_precision"] == 0.6
    rag = next(s for s in report["summaries"] if s["name"] == "RAGLoop")
    assert rag["selective"]["target"] == 0.6
    assert rag["selective"]["curve"]
    assert all("probability" in r and "right" in r for r in report["results"]["RAGLoop"])
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_calibrate_fits_a_selective_calibration_by_default(tmp_path):
    code, out = _eval(
        str(ANSWERS),
        "--corpus",
        str(CORPUS),
        "--embedder",
        "none",
        "--kb",
        str(tmp_path / "kb.sqlite"),
        "--engine",
        "rag",
        "--calibrate",
        str(tmp_path / "calibration.json"),
    )
    assert code == 0, out
    calibration = Calibration.load(tmp_path / "calibration.json")
    assert calibration.method == "selective"
    assert len(calibration.coverages) == len(calibration.thresholds)
    assert calibration.coverages[0] == 1.0  # the lowest step answers every question
    # the lowest step's precision is the share of all 11 answers that were right
    assert calibration.values[0] == pytest.approx(calibration.accuracy, abs=1e-4)


def test_eval_calibrate_refuses_what_it_cannot_fit_before_any_work(tmp_path):
    code, out = _eval(
        str(ANSWERS), "--corpus", str(CORPUS), "--engine", "bm25", "--calibrate", "c.json"
    )
    assert code == 2
    assert "--calibrate needs an answering configuration" in out
    code, out = _eval(
        str(FIXTURES / "beir_pool.json"),
        "--kb",
        str(tmp_path / "kb.sqlite"),
        "--calibrate",
        str(tmp_path / "c.json"),
    )
    assert code == 2
    assert "needs gold answers" in out
    assert not (tmp_path / "kb.sqlite").exists()
    code, out = _eval(str(ANSWERS), "--corpus", str(CORPUS), "--target-precision", "1.5")
    assert code == 2
    assert "1.5" in out

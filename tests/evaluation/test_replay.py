"""Replaying stored runs against the knowledge base as it is now: what changed, question by
question, and a gate for CI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragloop import KnowledgeBase
from ragloop.cli import main
from ragloop.evaluation.replay import (
    RunOutcome,
    answer_text,
    compare,
    render_html,
    replay,
    replay_questions,
    run_settings,
)
from ragloop.offline import ENGINES

KETTLE = "# Kettle\n\nThe kettle boils water in ninety seconds.\n"
TOASTER = "# Toaster\n\nThe toaster has six browning levels.\n"
KETTLE_Q = "How long does the kettle take to boil water?"
TOASTER_Q = "How many browning levels does the toaster have?"


@pytest.fixture
def shop(tmp_path) -> tuple[Path, Path]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kettle.md").write_text(KETTLE)
    (docs / "toaster.md").write_text(TOASTER)
    kb = tmp_path / "kb.sqlite"
    with KnowledgeBase(kb, embedder=None) as base:
        base.ingest(docs)
    return kb, docs


def ragloop(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def ask(kb: Path, question: str, *options: str) -> None:
    code, out = ragloop("ask", question, "--kb", str(kb), *options)
    assert code == 0, out


def reingest(kb: Path, docs: Path) -> None:
    code, out = ragloop("ingest", str(docs), "--kb", str(kb), "--sync", "--embedder", "none", "-q")
    assert code == 0, out


def stored(kb: Path) -> list:
    from ragloop.observability.traces import TraceStore

    store = TraceStore(kb.with_suffix(".traces.sqlite"))
    records = [store.get(r.id) for r in store.list(100)]
    store.close()
    return sorted(records, key=lambda r: r.started_at)


def engines_over(kb_path: Path):
    kb = KnowledgeBase(kb_path, create=False, embedder=None)
    built = []

    def make(name, spec, settings):
        built.append((name, spec, settings))
        return ENGINES[name](kb, **settings)

    return kb, make, built


def test_a_replay_of_an_unchanged_knowledge_base_finds_every_question_the_same(shop):
    kb_path, _ = shop
    ask(kb_path, KETTLE_Q)
    ask(kb_path, TOASTER_Q, "--engine", "agent")
    kb, make, built = engines_over(kb_path)
    report = replay(stored(kb_path), make)
    assert [q.verdict for q in report.questions] == ["same", "same"]
    assert [name for name, _, _ in built] == ["rag", "agent"]  # each run's own engine
    assert report.not_worse == 1.0
    first = report.questions[0]
    assert first.before.cited == first.after.cited == ["kettle.md"]
    assert first.after.searches >= 1
    kb.close()


def test_after_a_change_only_the_questions_that_read_it_change(shop):
    kb_path, docs = shop
    ask(kb_path, KETTLE_Q)
    ask(kb_path, TOASTER_Q)
    (docs / "kettle.md").write_text(KETTLE.replace("ninety", "sixty"))
    (docs / "toaster.md").unlink()
    reingest(kb_path, docs)
    kb, make, _ = engines_over(kb_path)
    report = replay(stored(kb_path), make)
    kettle, toaster = report.questions
    assert kettle.verdict == "changed"
    assert kettle.answer_changed
    assert "sixty" in kettle.after.answer
    assert toaster.verdict == "worse"  # its source is gone: it no longer stands by an answer
    assert toaster.cited_lost == ["toaster.md"]
    assert report.counts["changed"] == 1
    assert report.counts["worse"] == 1
    assert report.not_worse == 0.5
    page = render_html(report)
    assert "<script" not in page
    assert "- toaster.md" in page
    kb.close()


def test_a_run_is_replayed_with_the_settings_it_was_made_with(shop):
    kb_path, _ = shop
    ask(kb_path, KETTLE_Q, "--max-iterations", "1", "--target-precision", "0.99")
    (record,) = stored(kb_path)
    assert run_settings(record) == ("rag", None, {"max_iterations": 1, "target_precision": 0.99})
    kb, make, built = engines_over(kb_path)
    (again,) = replay([record], make).questions
    assert built == [("rag", None, {"max_iterations": 1, "target_precision": 0.99})]
    assert again.after.iterations == 1
    assert not again.after.confident  # 0.99 is out of reach, as it was the first time
    assert again.verdict == "same"
    kb.close()


def test_an_eval_set_replays_its_stored_questions_and_runs_the_new_ones(shop):
    kb_path, _ = shop
    ask(kb_path, KETTLE_Q)
    kb, make, _ = engines_over(kb_path)
    report = replay_questions([KETTLE_Q, TOASTER_Q], stored(kb_path), make, engine="rag")
    assert [(q.question, q.verdict) for q in report.questions] == [
        (KETTLE_Q, "same"),
        (TOASTER_Q, "new"),
    ]
    assert report.questions[1].after.cited == ["toaster.md"]
    assert report.not_worse == 1.0  # a new question is not counted either way
    kb.close()


def test_a_question_whose_engine_fails_is_reported_and_the_replay_goes_on(shop):
    kb_path, _ = shop
    ask(kb_path, KETTLE_Q)
    ask(kb_path, TOASTER_Q)
    kb = KnowledgeBase(kb_path, create=False, embedder=None)

    class Broken:
        def run(self, question):
            if "kettle" in question:
                raise RuntimeError("the model server went away")
            return ENGINES["rag"](kb).run(question)

    report = replay(stored(kb_path), lambda name, spec, settings: Broken())
    assert [q.verdict for q in report.questions] == ["failed", "same"]
    assert "went away" in report.questions[0].error
    assert report.not_worse == 0.5
    kb.close()


def test_the_verdicts_follow_confidence_chance_and_citations():
    def run(confident=True, probability=0.7, cited=("a.md",), answer="A. [1]"):
        return RunOutcome(
            trace_id="t",
            answer=answer,
            cited=list(cited),
            stop_reason="converged" if confident else "max_iterations",
            confident=confident,
            probability=probability,
            iterations=1,
            searches=1,
            tokens=0,
        )

    assert compare("q", "rag", run(), run()).verdict == "same"
    assert compare("q", "rag", run(), run(answer="A. [1]\n\nSources: [1] a.md")).verdict == "same"
    assert compare("q", "rag", run(), run(answer="B. [1]")).verdict == "changed"
    assert compare("q", "rag", run(), run(cited=("b.md",))).verdict == "changed"
    assert compare("q", "rag", run(), run(confident=False)).verdict == "worse"
    assert compare("q", "rag", run(), run(probability=0.55)).verdict == "worse"
    assert compare("q", "rag", run(), run(cited=())).verdict == "worse"
    assert compare("q", "rag", run(confident=False), run()).verdict == "better"
    assert compare("q", "rag", run(probability=0.5), run(probability=0.65)).verdict == "better"
    assert answer_text("It is 2 kg. [1]\n\nSources: [1] a.md") == "It is 2 kg. [1]"


def test_ragloop_traces_replay_writes_json_and_html_and_gates_on_fail_under(shop, tmp_path):
    kb_path, docs = shop
    ask(kb_path, KETTLE_Q)
    ask(kb_path, TOASTER_Q)
    code, out = ragloop(
        "traces", "replay", "--last", "5", "--kb", str(kb_path), "--fail-under", "1"
    )
    assert code == 0, out
    assert "replayed 2 question(s): 2 same" in out

    (docs / "toaster.md").unlink()
    reingest(kb_path, docs)
    report_file, page_file = tmp_path / "replay.json", tmp_path / "replay.html"
    code, out = ragloop(
        "traces", "replay", "--stale", "--kb", str(kb_path), "--json", str(report_file),
        "--html", str(page_file), "--fail-under", "0.9",
    )  # fmt: skip
    assert code == 1, out
    assert "worse" in out
    assert "under --fail-under 0.9" in out
    report = json.loads(report_file.read_text())
    assert [q["question"] for q in report["questions"]] == [TOASTER_Q]  # only the stale run
    assert report["counts"]["worse"] == 1
    assert "toaster.md" in page_file.read_text()

    code, out = ragloop("traces", "replay", "--kb", str(kb_path))
    assert code == 2
    assert "choose the runs one way" in out


def test_a_run_says_how_many_model_calls_it_made(shop):
    from ragloop import LoopConfig, RAGLoop
    from ragloop.components.reformulators import LLMReformulator
    from ragloop.engines.defaults.rag import rag_parts
    from ragloop.observability.traces import TraceRecorder
    from ragloop.testing import ScriptedModel

    kb_path, _ = shop
    with KnowledgeBase(kb_path, create=False, embedder=None) as kb:
        parts = rag_parts(kb)
        reply = '{"strategy": "expand", "queries": ["kettle boiling time"], "reasoning": "more"}'
        loop = RAGLoop(
            parts.retriever,
            parts.generator,
            parts.evaluator,
            LLMReformulator(ScriptedModel([reply])),
            LoopConfig(max_iterations=2, target_precision=0.99),  # out of reach: it reformulates
        )
        with TraceRecorder(None) as recorder:
            result = loop.run(KETTLE_Q)
        (record,) = recorder.records.values()
    assert len(result.llm_calls) == 1
    assert RunOutcome.of(record).llm_calls == 1


def test_a_replay_with_other_settings_shows_what_the_change_does(shop):
    kb_path, _ = shop
    ask(kb_path, KETTLE_Q)
    code, out = ragloop(
        "traces", "replay", "--last", "1", "--kb", str(kb_path), "--set", "target_precision=0.99"
    )
    assert code == 0, out
    assert "converged -> max_iterations" in out  # 0.99 is out of the answer's reach
    assert "1 worse" in out
    code, out = ragloop("traces", "replay", "--last", "1", "--kb", str(kb_path), "--set", "x")
    assert code == 2
    assert "is not KEY=VALUE" in out


def test_confidence_is_read_from_the_run_not_guessed_from_its_stop(shop):
    kb_path, _ = shop
    ask(kb_path, KETTLE_Q, "--engine", "agent")
    (record,) = stored(kb_path)
    finished = record.events[-1]
    assert record.stop_reason == "answered"
    assert finished.attributes["confident"] is True
    assert RunOutcome.of(record).confident
    # an agent that answered below its target precision says so, and is not confident
    finished.attributes["confident"] = False
    assert not RunOutcome.of(record).confident
    del finished.attributes["confident"]  # a trace from before: the stop decides
    assert RunOutcome.of(record).confident


def test_each_replayed_run_is_stored_and_traces_show_opens_it(shop, tmp_path):
    kb_path, _ = shop
    ask(kb_path, KETTLE_Q)
    (first,) = stored(kb_path)
    report_file = tmp_path / "replay.json"
    code, out = ragloop(
        "traces", "replay", "--last", "1", "--kb", str(kb_path), "--json", str(report_file)
    )
    assert code == 0, out
    after = json.loads(report_file.read_text())["questions"][0]["after"]["trace_id"]
    assert f"ragloop traces show {after[:12]} --kb {kb_path}" in " ".join(out.split())
    code, shown = ragloop("traces", "show", after, "--kb", str(kb_path))
    assert code == 0, shown
    assert KETTLE_Q in " ".join(shown.split())
    again = next(r for r in stored(kb_path) if r.id == after)
    assert again.meta["replay_of"] == first.id  # it says which run it answered
    assert again.meta["engine"] == "rag"


def test_a_stale_run_replayed_is_answered_and_no_longer_listed_as_stale(shop):
    kb_path, docs = shop
    ask(kb_path, KETTLE_Q)
    (docs / "kettle.md").write_text(KETTLE.replace("ninety", "sixty"))
    reingest(kb_path, docs)
    code, out = ragloop("traces", "list", "--stale", "--kb", str(kb_path))
    assert code == 0, out
    assert "kettle.md (edited)" in out
    code, out = ragloop("traces", "replay", "--stale", "--kb", str(kb_path))
    assert code == 0, out
    assert "replayed 1 question(s): 1 changed" in out
    code, out = ragloop("traces", "list", "--stale", "--kb", str(kb_path))
    assert code == 0, out
    assert "no stale runs" in out  # the replay answered it, and reads the edit itself
    code, out = ragloop("traces", "replay", "--stale", "--kb", str(kb_path))
    assert "replayed 0 question(s)" in out  # the same run does not come back


def test_the_html_report_marks_the_words_the_new_answer_dropped_and_added(shop):
    kb_path, docs = shop
    ask(kb_path, KETTLE_Q)
    (docs / "kettle.md").write_text(KETTLE.replace("ninety", "sixty"))
    reingest(kb_path, docs)
    kb, make, _ = engines_over(kb_path)
    page = render_html(replay(stored(kb_path), make))
    kb.close()
    assert "<del>ninety</del>" in page
    assert "<ins>sixty</ins>" in page
    assert "<del>" not in page.split("<ins>sixty</ins>")[1].split("</td>")[0]  # now: no <del>

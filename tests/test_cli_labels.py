"""Labels are true (issue 18, item 10): what ran is said by its name, a retrieval run's hops are
in its trace, nobody is said to have stopped a run nobody stopped, both spellings of the
iteration cap work, and each kind of stop has its own colour."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ragloop import StopReason
from ragloop.observability.events import EventKind, LoopEvent
from ragloop.observability.report_html import render_html
from ragloop.observability.traces import TraceRecord
from ragloop.testing.conformance import write_corpus

QUESTION = "How much does the Ridgeline 2 tent weigh?"


def ragloop(*args, env=None):
    result = subprocess.run(
        [sys.executable, "-m", "ragloop", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("labels")
    docs = write_corpus(folder / "docs")
    env = {"RAGLOOP_KB": str(folder / "kb.sqlite")}
    ragloop("ingest", str(docs), "--embedder", "hash", env=env)
    return env


def test_ask_with_the_retrieval_engine_says_what_ran_and_keeps_its_hops(env, tmp_path):
    out = ragloop("ask", QUESTION, "--engine", "retrieval", "--max-iter", "2", env=env)
    # the retrieval loop's stop, not the one-iteration answering loop's "max_iterations"
    stop = re.search(r"stopped: (\w+) +after (\d) retrieval hop\(s\); answered in one", out)
    assert stop is not None, out
    listed = json.loads(ragloop("traces", "list", "--json", env=env))[0]
    assert listed["meta"]["engine"] == "retrieval"
    shown = ragloop("traces", "show", listed["id"], env=env)
    assert "engine retrieval" in shown
    assert "Retrieval hop 1" in shown  # the hops are part of the stored trace
    assert f"stopped: {stop.group(1)}" in shown
    page = tmp_path / "trace.html"
    ragloop("traces", "export", listed["id"], "--html", str(page), env=env)
    html = page.read_text(encoding="utf-8")
    assert html.count("<li class='hop'>") == int(stop.group(2))
    assert "<dd>retrieval</dd>" in html
    assert f"'>{stop.group(1)}</span>" in html


def test_agent_loop_names_the_loop_it_runs_and_takes_both_spellings(env):
    for cap in ("--max-iter", "--max-iterations"):
        out = ragloop("retrieval-loop", QUESTION, cap, "2", "--min-new-chunks", "0", env=env)
        assert out.splitlines()[0].startswith("loop:         RetrievalLoop")
        assert "stop_reason:  caller_stop" not in out  # nobody stopped it
        assert re.search(r"budget_used: .* iters=[12]\b", out)
    data = json.loads(ragloop("retrieval-loop", QUESTION, "--json", env=env))
    assert data["stop_reason"] in {"diminishing_returns", "no_new_queries", "max_iterations"}
    asked = ragloop("ask", QUESTION, "--max-iterations", "1", "--json", env=env)
    assert json.loads(asked)["iterations"] == 1


def record(stop_reason: str) -> TraceRecord:
    events = [
        LoopEvent(engine="rag", kind=EventKind.RUN_STARTED, run_id="r", attributes={}),
        LoopEvent(
            engine="rag",
            kind=EventKind.RUN_FINISHED,
            run_id="r",
            attributes={"stop_reason": stop_reason, "iterations": 0},
        ),
    ]
    return TraceRecord.from_events(events, content=False)


def test_each_kind_of_stop_has_its_own_colour_in_the_html_report():
    classes = {}
    for reason in StopReason:
        badge = re.search(r"<span class='badge stop (\w+)'>", render_html(record(reason.value)))
        assert badge is not None
        classes[reason] = badge.group(1)
    assert classes[StopReason.CONVERGED] == classes[StopReason.ANSWERED] == "success"
    kinds = {classes[r] for r in StopReason}
    assert len(kinds) == 7  # success, settled, limit, budget, caller, gave_up, error
    html = render_html(record("converged"))
    for kind in kinds:  # every kind has a style of its own
        assert f".badge.{kind} {{" in html

"""`ragloop ask`, `ragloop traces` and `--demo`, run as a user would: in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from ragloop.testing.conformance import write_corpus
from tests.providers.server import LoopbackServer, Reply
from tests.providers.wire import openai_completion

WEIGHT = "How much does the Skylark 2 weigh?"


def ragloop(*args, env=None, cwd=None):
    clean = {k: v for k, v in os.environ.items() if k != "RAGLOOP_TRACE_CONTENT"}
    return subprocess.run(
        [sys.executable, "-m", "ragloop", *args],
        capture_output=True,
        text=True,
        env={**clean, "COLUMNS": "120", **(env or {})},
        cwd=cwd,
        timeout=300,
    )


@pytest.fixture(scope="module")
def demo_env(tmp_path_factory):
    """A private demo cache, built by the first command that needs it."""
    return {"RAGLOOP_DEMO_DIR": str(tmp_path_factory.mktemp("demo-cache"))}


@pytest.fixture
def kb_env(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    env = {"RAGLOOP_KB": str(tmp_path / "kb.sqlite")}
    assert ragloop("ingest", str(docs), "--embedder", "none", env=env).returncode == 0
    return tmp_path, env


def test_ask_shows_each_iteration_then_the_cited_answer(demo_env):
    result = ragloop("ask", "--demo", WEIGHT, env=demo_env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Iteration 1" in out
    assert "original question" in out
    assert "products/skylark-2.md" in out
    assert "It weighs 1.6 kg" in out
    assert "Sources: [1] products/skylark-2.md" in out
    assert "stopped: converged" in out
    assert "ragloop traces show" in out


def test_ask_demo_asks_every_demo_question_and_sums_up(demo_env):
    result = ragloop("ask", "--demo", env=demo_env)
    assert result.returncode == 0, result.stderr
    for kind in ("first time", "vocabulary shift", "multi-part", "multi-hop"):
        assert kind in result.stdout
    assert "perspective_shift" in result.stdout
    assert "decompose" in result.stdout
    assert "demo questions" in result.stdout


def test_json_result_trace_file_and_the_traces_commands(demo_env, tmp_path):
    trace_file = tmp_path / "trace.json"
    question = "What warranty does the tent Priya Shah takes wild camping come with?"
    result = ragloop(
        "ask",
        "--demo",
        question,
        "--json",
        "--trace-out",
        str(trace_file),
        "--threshold",  # a run that converges (the default target, 0.8, is not reached here)
        "0.5",
        env=demo_env,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["stop_reason"] == "converged"
    assert [it["strategy"] for it in data["trace"]][:2] == [None, "decompose"]
    trace = json.loads(trace_file.read_text())
    assert trace["question"] == question
    assert trace["answer"] == data["answer"]
    listed = json.loads(ragloop("traces", "list", "--demo", "--json", env=demo_env).stdout)
    assert listed[0]["id"] == trace["id"]
    shown = ragloop("traces", "show", trace["id"][:10], "--demo", env=demo_env)
    assert shown.returncode == 0, shown.stderr
    assert "Iteration 2" in shown.stdout
    assert "Fellside Guarantee" in shown.stdout
    page = tmp_path / "trace.html"
    exported = ragloop("traces", "export", trace["id"], "--demo", "--html", str(page), env=demo_env)
    assert exported.returncode == 0, exported.stderr
    parser = TagCounter()
    parser.feed(page.read_text(encoding="utf-8"))
    assert parser.tags["li"] >= 2
    assert parser.tags["svg"] == 1
    assert "script" not in parser.tags
    missing = ragloop("traces", "show", "nope", "--demo", env=demo_env)
    assert missing.returncode == 1
    assert "no trace 'nope'" in missing.stderr


class TagCounter(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1


def test_search_demo(demo_env):
    result = ragloop("search", "--demo", "gear library hire", "--json", env=demo_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["source"].startswith("policies/gear-library.md")


def test_ask_a_knowledge_base_with_the_agent_engine(kb_env):
    tmp_path, env = kb_env
    result = ragloop(
        "ask", "How much does the Ridgeline 2 tent weigh?", "--engine", "agent", env=env
    )
    assert result.returncode == 0, result.stderr
    assert "Turn 1" in result.stdout
    assert "1.4 kg" in result.stdout
    assert "stopped: answered" in result.stdout
    assert (tmp_path / "kb.traces.sqlite").exists()
    listed = ragloop("traces", "list", env=env)
    assert "How much does the Ridgeline 2" in listed.stdout
    assert "agent" in listed.stdout


def test_the_retrieval_engine_gathers_evidence_then_answers(kb_env):
    _, env = kb_env
    question = "How much does the Ridgeline 2 tent weigh?"
    result = ragloop("ask", question, "--engine", "retrieval", "--max-iterations", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert "Retrieval hop 1" in result.stdout
    assert "1.4 kg" in result.stdout
    listed = json.loads(ragloop("traces", "list", "--json", env=env).stdout)
    assert listed[0]["question"] == question
    assert listed[0]["meta"]["engine"] == "retrieval"


def test_traces_content_false_keeps_text_out_of_the_trace(kb_env):
    """The local trace keeps the question by default (the export switch,
    RAGLOOP_TRACE_CONTENT, governs logs and spans); `[traces] content = false` keeps it out."""
    _, env = kb_env
    export_off = {**env, "RAGLOOP_TRACE_CONTENT": "0"}
    assert ragloop("ask", "How heavy is the Ridgeline 2 tent?", env=export_off).returncode == 0
    listed = json.loads(ragloop("traces", "list", "--json", env=env).stdout)
    assert listed[0]["question"] == "How heavy is the Ridgeline 2 tent?"
    off = {**env, "RAGLOOP_TRACES__CONTENT": "false"}
    assert ragloop("ask", "How much does the Ridgeline 2 tent weigh?", env=off).returncode == 0
    listed = json.loads(ragloop("traces", "list", "--json", env=env).stdout)
    assert listed[0]["question"] is None
    assert listed[0]["content"] is False


def test_usage_errors(kb_env):
    tmp_path, env = kb_env
    assert "no traces yet" in ragloop("traces", "list", env=env).stdout
    assert ragloop("ask", env=env).returncode == 2
    both = ragloop("ask", "x", "--demo", "--kb", str(tmp_path / "kb.sqlite"), env=env)
    assert both.returncode == 2
    assert "give one" in both.stderr
    bad = ragloop("ask", "tent weight", "--model", "nonsense", env=env)
    assert bad.returncode == 1
    assert "names no model" in bad.stderr


def test_with_a_model_the_llm_components_answer(kb_env):
    _, env = kb_env
    server = LoopbackServer().start()
    try:
        server.reply(
            Reply(json=openai_completion('{"answer": "It weighs 1.4 kg [1].", "confidence": 0.9}')),
            Reply(
                json=openai_completion(
                    '{"is_grounded": true, "is_complete": true, '
                    '"score": 0.9, "reason": "all there"}'
                )
            ),
        )
        spec = f"openai-compatible:{server.url}/v1#test-model"
        result = ragloop(
            "ask", "How much does the Ridgeline 2 tent weigh?", "--model", spec, "--json", env=env
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["answer"].startswith("It weighs 1.4 kg [1].\n\nSources: [1] ")
    assert data["trace"][0]["evaluation"]["reason"] == "all there"
    assert [r.body["model"] for r in server.received] == ["test-model", "test-model"]


def test_with_a_model_the_agent_engine_lets_it_drive(kb_env):
    _, env = kb_env
    server = LoopbackServer().start()
    try:
        server.reply(
            Reply(json=openai_completion(None, tool_calls=[("c1", "search", '{"query": "tent"}')])),
            Reply(json=openai_completion("The Ridgeline 2 weighs 1.4 kg.")),
        )
        spec = f"openai-compatible:{server.url}/v1#test-model"
        result = ragloop(
            "ask", "How heavy is the tent?", "--engine", "agent", "--model", spec, env=env
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    assert "Turn 1" in result.stdout
    assert "query  tent" in result.stdout
    assert "The Ridgeline 2 weighs 1.4 kg." in result.stdout
    assert "stopped: answered" in result.stdout
    assert [m["role"] for m in server.received[1].body["messages"]][-1] == "tool"


HALF = "How long do I have to return an item, and how much does a helicopter rescue cost?"


def test_an_unsure_answer_shows_what_was_found_and_what_was_not(demo_env):
    result = ragloop("ask", "--demo", HALF, env=demo_env)
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "Not sure: the closest passages" in out
    assert "No sure answer was found in the documents." in out  # the evidence first
    assert "The closest passages, best first:" in out
    assert "(policies/returns.md, " in out
    assert "found How long do I have to return an item in policies/returns.md" in out
    assert "not found how much does a helicopter rescue cost" in out
    assert "chance right" in out
    assert "(target 0.80)" in out
    assert "searched" in out
    data = json.loads(ragloop("ask", "--demo", HALF, "--json", env=demo_env).stdout)
    assert [p["found"] for p in data["gaps"]["parts"]] == [True, False]
    assert data["target_precision"] == 0.8
    shown = ragloop("traces", "show", "--demo", data["run_id"][:12], env=demo_env)
    assert "not found how much does a helicopter" in " ".join(shown.stdout.split())


def test_a_target_precision_from_the_flag_the_config_or_a_calibration(demo_env, tmp_path):
    question = "How much does the Skylark 2 weigh?"

    def asked(*flags, env=None):
        out = ragloop("ask", "--demo", question, "--json", *flags, env={**demo_env, **(env or {})})
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert asked()["stop_reason"] == "converged"
    strict = asked("--target-precision", "0.99")
    assert strict["stop_reason"] == "max_iterations"
    assert strict["target_precision"] == 0.99
    configured = asked(env={"RAGLOOP_ENGINE__TARGET_PRECISION": "0.99"})
    assert configured["target_precision"] == 0.99
    # a calibration that reads every score as right half the time never reaches 0.6
    flat = tmp_path / "flat.json"
    flat.write_text('{"method": "isotonic", "thresholds": [0.0], "values": [0.5]}')
    calibrated = asked("--target-precision", "0.6", "--calibration", str(flat))
    assert calibrated["stop_reason"] == "max_iterations"
    assert calibrated["probability"] == 0.5
    both = ragloop(
        "ask", "--demo", question, "--threshold", "0.5", "--target-precision", "0.5", env=demo_env
    )
    assert both.returncode == 2
    assert "give one" in both.stderr

"""ragloop retrieval-loop: seed 004's smoke command, run as a user would, in a subprocess."""

from __future__ import annotations

import json
import re

import pytest

from ragloop.testing.conformance import write_corpus
from tests.test_cli_kb import ragloop


@pytest.fixture(scope="module")
def kb_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrieval-loop")
    docs = write_corpus(root / "docs")
    path = root / "kb.sqlite"
    built = ragloop("ingest", str(docs), "--kb", str(path), "--embedder", "hash")
    assert built.returncode == 0, built.stderr
    return path


SUBS = ("tent weight", "How heavy is a  tent?", "refund policy")
ARGS = ("--max-iter", "4", *(arg for sub in SUBS for arg in ("--sub-query", sub)))


def test_prints_the_seeds_table(kb_file):
    result = ragloop(
        "retrieval-loop",
        "how heavy is a tent?",
        "--kb",
        str(kb_file),
        *ARGS,
        "--min-new-chunks",
        "0",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    what, *head = out.splitlines()[:7]
    assert what.startswith("loop:         RetrievalLoop (offline")  # what ran, by its name
    assert head[0] == "query:        'how heavy is a tent?'"
    assert head[1] == "stop_reason:  max_iterations"
    assert re.fullmatch(r"budget_used:  tokens=\d+ wall_ms=\d+ iters=4", head[2])
    assert head[3] == "cache_stats:  hits=1 misses=3 rate=0.25"  # the question, asked again
    assert re.fullmatch(r"final_chunks: \d+", head[4])
    assert head[5] == "iterations:"
    rows = [line for line in out.splitlines() if line.startswith("  #")]
    assert len(rows) == 4
    assert rows[0].startswith("  #0  q='how heavy is a tent?'")
    # the offline loop searches hybrid whatever the query's shape (measured best), and the
    # route stays iteration 0's (sticky)
    assert all("route=hybrid" in row for row in rows)
    assert re.search(r"plan_reused=False +sticky=False", rows[0])
    for row in rows[1:]:
        assert re.search(r"plan_reused=True +sticky=True", row)
    assert rows[1].startswith("  #1  q='tent weight'")
    assert rows[3].startswith("  #3  q='refund policy'")
    assert "top chunks:" in out
    assert "camping/tents.md" in out


def test_json_output_and_the_default_stop_rules(kb_file):
    result = ragloop(
        "retrieval-loop", "how heavy is a tent?", "--kb", str(kb_file), *ARGS, "--json"
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["query"] == "how heavy is a tent?"
    assert data["stop_reason"] == "diminishing_returns"  # --min-new-chunks 2 by default
    assert [it["query"] for it in data["trace"]] == ["how heavy is a tent?", "tent weight"]
    assert set(data["cache_stats"]) == {"hits", "misses", "rate"}
    assert data["chunks"]
    assert all({"id", "source", "score", "content"} <= set(c) for c in data["chunks"])


def test_log_json_writes_one_json_line_per_iteration_to_stderr(kb_file):
    result = ragloop(
        "retrieval-loop",
        "tent weight",
        "--kb",
        str(kb_file),
        "--max-iter",
        "2",
        "--sub-query",
        "billing",
        "--min-new-chunks",
        "0",
        "--log-json",
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    kinds = [line["kind"] for line in lines if line.get("engine") == "retrieval"]
    assert kinds == ["run_started", "iteration", "iteration", "run_finished"]
    iteration = next(line for line in lines if line.get("kind") == "iteration")
    assert iteration["logger"] == "ragloop"
    assert iteration["attributes"]["route"] == "hybrid"
    assert "stop_reason:  max_iterations" in result.stdout


def test_a_missing_knowledge_base_is_a_clean_error(tmp_path):
    result = ragloop("retrieval-loop", "anything", "--kb", str(tmp_path / "none.sqlite"))
    assert result.returncode == 1
    assert "no knowledge base at" in result.stderr
    assert not (tmp_path / "none.sqlite").exists()


def test_demo_finds_priyas_pick_and_its_tent(tmp_path):
    env = {"RAGLOOP_DEMO_DIR": str(tmp_path / "demo")}
    question = "What warranty does the tent Priya Shah takes wild camping come with?"
    result = ragloop("retrieval-loop", question, "--demo", "--json", env=env)
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout)
    assert run["iterations"] >= 2  # later hops follow the names the first one found
    sources = [c["source"] for c in run["chunks"]]
    assert set(sources[:2]) == {"staff/staff-picks.md", "products/skylark-2.md"}
    both = ragloop(
        "retrieval-loop", question, "--demo", "--kb", str(tmp_path / "kb.sqlite"), env=env
    )
    assert both.returncode == 2


def test_the_old_name_agent_loop_still_runs_it_and_is_not_listed(kb_file):
    old = ragloop("agent-loop", "how heavy is a tent?", "--kb", str(kb_file), *ARGS, "--json")
    new = ragloop("retrieval-loop", "how heavy is a tent?", "--kb", str(kb_file), *ARGS, "--json")
    assert old.returncode == 0, old.stderr
    assert [c["id"] for c in json.loads(old.stdout)["chunks"]] == [
        c["id"] for c in json.loads(new.stdout)["chunks"]
    ]
    listed = ragloop("--help")
    assert "retrieval-loop" in listed.stdout
    assert "agent-loop" not in listed.stdout

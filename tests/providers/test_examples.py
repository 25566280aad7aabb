"""examples/with_openai.py and examples/with_anthropic.py run as a user runs them, in their own
process, against a loopback server speaking each provider's wire format (issue 18, item 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.providers.server import Reply
from tests.providers.wire import anthropic_message, openai_completion

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUESTION = "What warranty does the tent Priya Shah takes wild camping come with?"

# the model's five replies: answer, judge (incomplete), rewrite, answer, judge (complete)
REPLIES = [
    {"answer": "Priya takes the Skylark 2 [1], with the Fellside Guarantee.", "confidence": 0.6},
    {
        "is_grounded": True,
        "is_complete": False,
        "score": 0.5,
        "reason": "missing second hop: how long the Fellside Guarantee lasts",
    },
    {
        "strategy": "decompose",
        "queries": ["tent Priya Shah wild camping", "Fellside Guarantee tents years"],
        "reasoning": "the guarantee's length is in another document",
    },
    {"answer": "The Skylark 2 is covered for 3 years [1].", "confidence": 0.9},
    {"is_grounded": True, "is_complete": True, "score": 0.95, "reason": "3 years, cited"},
]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo")


def run_example(name: str, environment: dict[str, str], demo_dir: Path) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(demo_dir),
        "RAGLOOP_DEMO_DIR": str(demo_dir),
        **environment,
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def check_output(stdout: str) -> None:
    assert "The Skylark 2 is covered for 3 years [1]." in stdout
    assert "Sources: [1]" in stdout  # the citation resolved against the chunks retrieved
    assert "converged 2" in stdout
    assert "decompose ['tent Priya Shah wild camping', 'Fellside Guarantee tents years']" in stdout


def prompts(server) -> list[str]:
    return [json.dumps(r.body["messages"]) for r in server.received]


def test_the_openai_example(server, demo_dir):
    server.reply(*(Reply(json=openai_completion(json.dumps(r))) for r in REPLIES))
    stdout = run_example(
        "with_openai.py",
        {"OPENAI_BASE_URL": f"{server.url}/v1", "OPENAI_API_KEY": "sk-test"},
        demo_dir,
    )
    check_output(stdout)
    assert [r.path for r in server.received] == ["/v1/chat/completions"] * 5
    assert {r.headers["authorization"] for r in server.received} == {"Bearer sk-test"}
    assert {r.body["model"] for r in server.received} == {"gpt-4o-mini"}
    assert all(QUESTION in p for p in prompts(server))


def test_the_anthropic_example(server, demo_dir):
    server.reply(*(Reply(json=anthropic_message(json.dumps(r))) for r in REPLIES))
    stdout = run_example(
        "with_anthropic.py",
        {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-test"},
        demo_dir,
    )
    check_output(stdout)
    assert "cost_usd=" in stdout  # priced from ragloop's table, within the example's budget
    assert [r.path for r in server.received] == ["/v1/messages"] * 5
    assert {r.headers["x-api-key"] for r in server.received} == {"sk-ant-test"}
    assert {r.body["model"] for r in server.received} == {"claude-haiku-4-5"}
    assert all(QUESTION in p for p in prompts(server))

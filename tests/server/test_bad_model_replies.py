"""A model that replies with JSON nested 100,000 deep, or that answers after the run's deadline
(issue 58, items 3 and 7), against a fake OpenAI-compatible model on 127.0.0.1: a 502 with the
reason (nested) or a 504 (deadline) on every route and in every stream, never a 500 or a 200
that reads "not found"; the CLI says it in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from ragloop.config import Settings
from ragloop.providers import override_allow_model_requests
from tests.providers.server import ChatServer
from tests.server.conftest import auth, key_settings, serving

openai = pytest.importorskip("openai", reason="the OpenAI client is a dev dependency")

QUESTION = "How much does the Skylark 2 weigh?"
CHAT = [{"role": "user", "content": QUESTION}]
NESTED = "[" * 100_000


def with_model(spec: str, **server: object) -> Settings:
    model = Settings.model_validate({"model": {"spec": spec}}).model
    return key_settings(**server).model_copy(update={"model": model})


@pytest.fixture(autouse=True)
def loopback_models() -> Iterator[None]:
    with override_allow_model_requests("loopback"):
        yield


@pytest.fixture(scope="module")
def nested_model() -> Iterator[ChatServer]:
    """Streams a good answer; every reply that is not streamed (the judge's, the
    controller's, a CLI's) is the nested body."""
    with ChatServer("The Skylark 2 weighs 2.1 kg.", body=NESTED) as model:
        yield model


def last_event(text: str) -> tuple[str, dict]:
    block = text.strip().split("\n\n")[-1]
    lines = dict(line.split(": ", 1) for line in block.splitlines())
    return lines["event"], json.loads(lines["data"])


@pytest.mark.parametrize("engine", ["rag", "retrieval", "agent"])
def test_a_deeply_nested_reply_is_a_502_with_the_reason(nested_model, kb_file, tmp_path, engine):
    with serving(kb_file, with_model(nested_model.spec), tmp_path) as (url, _):
        body = {"question": QUESTION, "engine": engine}
        answered = httpx.post(url + "/v1/ask", json=body, headers=auth("alice"), timeout=120)
        assert answered.status_code == 502, answered.text
        assert "nested too deeply" in answered.json()["detail"]
        streamed = httpx.post(
            url + "/v1/ask", json={**body, "stream": True}, headers=auth("alice"), timeout=120
        )
        kind, data = last_event(streamed.text)
        assert (kind, data["status"]) == ("error", 502), streamed.text[-500:]


def test_the_openai_route_answers_a_nested_reply_in_openais_format(nested_model, kb_file, tmp_path):
    with (
        serving(kb_file, with_model(nested_model.spec), tmp_path) as (url, _),
        openai.OpenAI(base_url=f"{url}/v1", api_key="rl-alice-key", max_retries=0) as client,
        pytest.raises(openai.APIStatusError) as failed,
    ):
        client.chat.completions.create(model="ragloop-rag", messages=CHAT)
    assert failed.value.status_code == 502
    assert failed.value.code == "model_error"
    assert "nested too deeply" in failed.value.message


def test_the_cli_says_a_nested_reply_in_one_line(nested_model, kb_file):
    environment = {**os.environ, "RAGLOOP_ALLOW_MODEL_REQUESTS": "loopback"}
    for engine in ("rag", "retrieval"):
        command = ["ask", "--kb", str(kb_file), "--model", nested_model.spec, "--engine", engine]
        ran = subprocess.run(
            [sys.executable, "-m", "ragloop", *command, "--json", QUESTION],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
        )
        assert ran.returncode == 1, ran.stdout
        assert "Traceback" not in ran.stderr
        assert "nested too deeply" in ran.stderr


@pytest.fixture(scope="module")
def late_model() -> Iterator[ChatServer]:
    with ChatServer("The Skylark 2 weighs 2.1 kg.", delay_s=40) as model:
        yield model


def test_a_run_past_its_deadline_without_an_answer_is_a_504(late_model, kb_file, tmp_path):
    settings = with_model(late_model.spec, deadline_s=2)
    with serving(kb_file, settings, tmp_path) as (url, _):
        for engine in ("rag", "retrieval"):
            body = {"question": QUESTION, "engine": engine}
            answered = httpx.post(url + "/v1/ask", json=body, headers=auth("alice"), timeout=60)
            assert answered.status_code == 504, answered.text
            assert "deadline" in answered.json()["detail"]
            streamed = httpx.post(
                url + "/v1/ask", json={**body, "stream": True}, headers=auth("alice"), timeout=60
            )
            kind, data = last_event(streamed.text)
            assert (kind, data["status"]) == ("error", 504), streamed.text[-500:]
        with openai.OpenAI(base_url=f"{url}/v1", api_key="rl-alice-key", max_retries=0) as client:
            with pytest.raises(openai.APIStatusError) as late:
                client.chat.completions.create(model="ragloop-rag", messages=CHAT)
            assert late.value.status_code == 504
            assert "Not found" not in late.value.message
            stream = client.chat.completions.create(model="ragloop-rag", messages=CHAT, stream=True)
            seen: list = []
            with pytest.raises(openai.APIError) as cut:
                seen.extend(stream)
            assert "deadline" in cut.value.message
        text = "".join(c.choices[0].delta.content or "" for c in seen if c.choices)
        assert "Not found" not in text


async def test_mcp_says_why_a_run_failed(nested_model, late_model, tmp_path):
    """MCP's ask answers the same reasons as a tool error, not "Error executing tool"."""
    pytest.importorskip("mcp", reason="the MCP tests need ragloop[server]")
    from ragloop.providers.openai_compat import OpenAICompatibleModel
    from tests.server.conftest import build_kb
    from tests.server.test_mcp_tools import serving_mcp

    kb_path = build_kb(tmp_path / "kb.sqlite")
    for model, reason in ((nested_model, "nested too deeply"), (late_model, "deadline")):
        base_url = model.spec.removeprefix("openai-compatible:").removesuffix("#m")
        chat = OpenAICompatibleModel("m", base_url=base_url)
        async with serving_mcp(kb_path, tmp_path, "alice", chat) as (client, service):
            server = service.settings.server.model_copy(update={"deadline_s": 2})
            service.settings = service.settings.model_copy(update={"server": server})
            called = await client.call_tool("ask", {"question": QUESTION, "engine": "rag"})
            assert called.is_error
            text = called.content[0].text
            assert reason in text  # the reason, not a bare "Error executing tool ask"

"""One error -> status map on every route (issue 31, item 14): a model that cannot be reached is
a 502 (not a 422), one that does not answer in time a 504, a closed knowledge base a 503, and
the OpenAI routes answer in OpenAI's error format, read by the official client; the OpenAI
stream of a failed run ends with an error chunk, not with the failure as the answer."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from ragloop.config import EngineSettings, Settings
from ragloop.providers import override_allow_model_requests
from ragloop.providers.http import RetryPolicy
from ragloop.providers.openai_compat import OpenAICompatibleModel
from tests.server.conftest import KEYS, auth, key_settings, serving

openai = pytest.importorskip("openai", reason="the OpenAI client is a dev dependency")

QUESTION = "How much does the Skylark 2 weigh?"
CHAT = [{"role": "user", "content": QUESTION}]


@pytest.fixture(autouse=True)
def loopback_models() -> Iterator[None]:
    """The model requests these tests make go to 127.0.0.1 only."""
    with override_allow_model_requests("loopback"):
        yield


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


def unreachable_model(**extra: object) -> Settings:
    spec = f"openai-compatible:http://127.0.0.1:{closed_port()}/v1#local-model"
    return key_settings(**extra).model_copy(
        update={"model": Settings.model_validate({"model": {"spec": spec}}).model}
    )


@pytest.fixture
def down(kb_file, tmp_path):
    """A server whose model (OpenAI-compatible provider, from the config) is on a closed port;
    the provider tries once (its retries only make the test slower)."""
    with serving(kb_file, unreachable_model(), tmp_path) as (url, service):
        assert isinstance(service.model, OpenAICompatibleModel)
        service.model = OpenAICompatibleModel(
            "local-model", base_url=service.model.base_url, retry=RetryPolicy(max_attempts=1)
        )
        yield url, service


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/ask", {"question": QUESTION}),
        ("/v1/ask", {"question": QUESTION, "engine": "agent"}),
        ("/v1/ask", {"question": QUESTION, "engine": "retrieval"}),
        ("/v1/retrieve", {"question": QUESTION}),
    ],
)
def test_an_unreachable_model_is_a_502_naming_it(down, path, body):
    url, _ = down
    response = httpx.post(url + path, json=body, headers=auth("alice"), timeout=120)
    assert response.status_code == 502, response.text
    detail = response.json()["detail"]
    assert detail.startswith("the model failed")
    assert "could not reach http://127.0.0.1" in detail


def test_a_streamed_run_whose_model_is_unreachable_ends_with_an_error_event(down):
    url, _ = down
    body = {"question": QUESTION, "stream": True}
    response = httpx.post(url + "/v1/ask", json=body, headers=auth("alice"), timeout=120)
    assert response.status_code == 200  # the stream had started
    last = response.text.strip().split("\n\n")[-1]
    assert last.startswith("event: error")
    data = json.loads(last.split("data: ", 1)[1])
    assert data["status"] == 502
    assert data["detail"].startswith("the model failed: could not reach")


def test_the_openai_client_reads_our_errors(down):
    url, _ = down
    with openai.OpenAI(base_url=f"{url}/v1", api_key=KEYS["alice"], max_retries=0) as client:
        with pytest.raises(openai.NotFoundError) as unknown:
            client.chat.completions.create(model="gpt-4o", messages=CHAT)
        assert "model 'gpt-4o' does not exist" in str(unknown.value)  # not just "Error code"
        assert unknown.value.code == "model_not_found"
        assert unknown.value.type == "invalid_request_error"

        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(model="ragloop", messages=CHAT)
        assert failed.value.status_code == 502
        assert "the model failed: could not reach" in failed.value.message
        assert failed.value.code == "model_error"

        with pytest.raises(openai.BadRequestError) as invalid:
            client.chat.completions.create(model="ragloop", messages=[])  # no user message
        assert "user message" in invalid.value.message

    with openai.OpenAI(base_url=f"{url}/v1", api_key="rl-wrong", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError) as refused:
            client.models.list()
        assert "unknown API key" in refused.value.message


def test_a_malformed_openai_request_is_a_400_naming_the_field(down):
    url, _ = down
    response = httpx.post(
        url + "/v1/chat/completions", json={"model": "ragloop"}, headers=auth("alice")
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages"


def test_the_openai_stream_of_a_failed_run_ends_with_an_error_chunk(down):
    url, _ = down
    with openai.OpenAI(base_url=f"{url}/v1", api_key=KEYS["alice"], max_retries=0) as client:
        stream = client.chat.completions.create(model="ragloop", messages=CHAT, stream=True)
        seen: list = []
        with pytest.raises(openai.APIError) as failed:
            seen.extend(stream)
        assert "the model failed" in failed.value.message
    text = "".join(c.choices[0].delta.content or "" for c in seen if c.choices)
    assert "the loop failed" not in text
    assert "the model failed" not in text
    assert not any(c.choices and c.choices[0].finish_reason == "stop" for c in seen)


def test_a_model_that_does_not_answer_in_time_is_a_504(kb_file, tmp_path):
    with silent_server() as port, serving(kb_file, key_settings(), tmp_path) as (url, service):
        service.model = OpenAICompatibleModel(
            "local-model",
            base_url=f"http://127.0.0.1:{port}/v1",
            timeout=1.0,
            retry=RetryPolicy(max_attempts=1),
        )
        response = httpx.post(
            url + "/v1/ask", json={"question": QUESTION}, headers=auth("alice"), timeout=120
        )
        assert response.status_code == 504, response.text
        assert "did not answer in time" in response.json()["detail"]
        with (
            openai.OpenAI(base_url=f"{url}/v1", api_key=KEYS["alice"], max_retries=0) as client,
            pytest.raises(openai.APIStatusError) as late,
        ):
            client.chat.completions.create(model="ragloop", messages=CHAT)
        assert late.value.status_code == 504
        assert late.value.code == "timeout"


def test_a_closed_knowledge_base_is_a_503(kb_file, tmp_path):
    with serving(kb_file, key_settings(), tmp_path) as (url, service):
        service.kb.close()
        response = httpx.post(url + "/v1/search", json={"query": "tent"}, headers=auth("alice"))
        assert response.status_code == 503, response.text
        assert "knowledge base" in response.json()["detail"]


def test_a_configuration_the_engine_refuses_is_a_503_not_the_callers_fault(kb_file, tmp_path):
    broken = key_settings().model_copy(
        update={"engine": EngineSettings.model_construct(default="rag", max_iterations=0)}
    )
    with serving(kb_file, broken, tmp_path) as (url, _):
        response = httpx.post(url + "/v1/ask", json={"question": QUESTION}, headers=auth("alice"))
        assert response.status_code == 503, response.text
        assert "server's configuration" in response.json()["detail"]
        assert "max_iterations" in response.json()["detail"]

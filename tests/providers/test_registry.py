"""Model specs, base URLs and API keys: a key never goes where it was not configured to go."""

from __future__ import annotations

import pytest

from ragloop import (
    AnthropicModel,
    ConfigError,
    Message,
    OpenAICompatibleEmbedder,
    OpenAICompatibleModel,
    get_embedder,
    get_model,
    resolve_model,
)
from ragloop.providers.endpoints import ANTHROPIC_ENV, OPENAI_ENV, resolve_endpoint
from tests.providers.server import Reply
from tests.providers.wire import anthropic_message, openai_completion

ASK = [Message(role="user", content="hi")]
PUBLIC = "https://api.openai.com/v1"
LOCAL = "http://localhost:11434/v1"


def test_specs_name_provider_model_and_url():
    openai = get_model("openai:gpt-4o-mini")
    assert isinstance(openai, OpenAICompatibleModel)
    assert (openai.provider, openai.model_name, openai.base_url) == (
        "openai",
        "gpt-4o-mini",
        PUBLIC,
    )

    claude = get_model("anthropic:claude-sonnet-4-5", max_tokens=512)
    assert isinstance(claude, AnthropicModel)
    assert (claude.provider, claude.model_name, claude.max_tokens) == (
        "anthropic",
        "claude-sonnet-4-5",
        512,
    )
    assert claude.base_url == "https://api.anthropic.com"

    local = get_model(f"openai-compatible:{LOCAL}#llama3.1:8b")
    assert (local.provider, local.model_name, local.base_url) == (
        "openai-compatible",
        "llama3.1:8b",
        LOCAL,
    )


@pytest.mark.parametrize("spec", [None, "", "offline", " Offline "])
def test_offline_means_no_model(spec):
    assert resolve_model(spec) is None


def test_resolve_model_passes_other_specs_to_get_model():
    model = resolve_model("openai:gpt-4o", temperature=0.1)
    assert isinstance(model, OpenAICompatibleModel)
    assert model.temperature == 0.1


@pytest.mark.parametrize(
    "spec",
    [
        "gpt-4o-mini",
        "openai:",
        "mistral:large",
        "openai-compatible:llama3.1",
        "openai-compatible:http://localhost:11434/v1#",
        "openai-compatible:ftp://host/v1#m",
    ],
)
def test_bad_specs_say_what_is_expected(spec):
    with pytest.raises(ConfigError):
        get_model(spec)


def test_get_embedder():
    embedder = get_embedder(f"openai-compatible:{LOCAL}#nomic-embed-text", dimension=768)
    assert isinstance(embedder, OpenAICompatibleEmbedder)
    assert (embedder.model_id, embedder.dimension) == ("nomic-embed-text", 768)
    with pytest.raises(ConfigError, match="no embeddings"):
        get_embedder("anthropic:claude-sonnet-4-5")


@pytest.mark.parametrize(
    ("environ", "base_url", "expected_base", "expected_key"),
    [
        # the standard variables go together
        ({"OPENAI_API_KEY": "sk-std"}, None, PUBLIC, "sk-std"),
        ({"OPENAI_API_KEY": "sk-std", "OPENAI_BASE_URL": LOCAL}, None, LOCAL, "sk-std"),
        # a key is not sent to a base URL given by argument...
        ({"OPENAI_API_KEY": "sk-std"}, LOCAL, LOCAL, None),
        # ...unless it is the very URL the key was configured for
        ({"OPENAI_API_KEY": "sk-std", "OPENAI_BASE_URL": LOCAL}, LOCAL + "/", LOCAL, "sk-std"),
        ({"OPENAI_API_KEY": "sk-std"}, PUBLIC, PUBLIC, "sk-std"),
        # RAGLOOP_* override, and their key follows the standard base URL when theirs is unset
        ({"OPENAI_API_KEY": "sk-std", "RAGLOOP_OPENAI_API_KEY": "sk-rl"}, None, PUBLIC, "sk-rl"),
        (
            {"RAGLOOP_OPENAI_API_KEY": "sk-rl", "OPENAI_BASE_URL": LOCAL},
            None,
            LOCAL,
            "sk-rl",
        ),
        # a RAGLOOP base URL does not receive the standard key
        ({"OPENAI_API_KEY": "sk-std", "RAGLOOP_OPENAI_BASE_URL": LOCAL}, None, LOCAL, None),
        (
            {
                "OPENAI_API_KEY": "sk-std",
                "RAGLOOP_OPENAI_API_KEY": "sk-rl",
                "RAGLOOP_OPENAI_BASE_URL": LOCAL,
            },
            None,
            LOCAL,
            "sk-rl",
        ),
        # empty variables are unset
        ({"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}, None, PUBLIC, None),
    ],
)
def test_openai_key_and_base_url_rules(environ, base_url, expected_base, expected_key):
    endpoint = resolve_endpoint(OPENAI_ENV, base_url=base_url, environ=environ)
    assert (endpoint.base_url, endpoint.api_key) == (expected_base, expected_key)


def test_explicit_arguments_win():
    environ = {"OPENAI_API_KEY": "sk-std", "OPENAI_BASE_URL": LOCAL}
    endpoint = resolve_endpoint(OPENAI_ENV, base_url=PUBLIC, api_key="sk-arg", environ=environ)
    assert (endpoint.base_url, endpoint.api_key) == (PUBLIC, "sk-arg")


def test_the_reason_no_key_is_sent_is_kept():
    endpoint = resolve_endpoint(
        ANTHROPIC_ENV, base_url=LOCAL, environ={"ANTHROPIC_API_KEY": "sk-ant"}
    )
    assert endpoint.api_key is None
    assert "ANTHROPIC_API_KEY not sent" in endpoint.no_key_reason


def test_a_bad_base_url_in_the_environment_names_the_variable():
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        resolve_endpoint(OPENAI_ENV, environ={"OPENAI_BASE_URL": "localhost:11434"})


def test_the_openai_key_never_reaches_an_openai_compatible_server(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    server.reply(Reply(json=openai_completion("hi")))
    with get_model(f"openai-compatible:{server.url}/v1#llama3.1") as model:
        model.complete(ASK)
    headers = server.received[0].headers
    assert "authorization" not in headers
    assert "sk-secret" not in str(headers)


def test_the_openai_key_goes_to_the_base_url_configured_with_it(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    server.reply(Reply(json=openai_completion("hi")), Reply(json=openai_completion("hi")))
    with get_model("openai:llama3.1") as model:
        model.complete(ASK)
    with get_model(f"openai-compatible:{server.url}/v1/#llama3.1") as model:
        model.complete(ASK)
    assert [r.headers["authorization"] for r in server.received] == ["Bearer sk-secret"] * 2


def test_an_explicit_key_is_sent(server):
    server.reply(Reply(json=openai_completion("hi")))
    with get_model(f"openai-compatible:{server.url}#m", api_key="vllm-token") as model:
        model.complete(ASK)
    assert server.received[0].headers["authorization"] == "Bearer vllm-token"


def test_the_anthropic_key_follows_the_same_rule(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    server.reply(Reply(json=anthropic_message("hi")), Reply(json=anthropic_message("hi")))
    with AnthropicModel("claude-haiku-4-5", base_url=server.url) as model:
        model.complete(ASK)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    with get_model("anthropic:claude-haiku-4-5") as model:
        model.complete(ASK)
    assert "x-api-key" not in server.received[0].headers
    assert server.received[1].headers["x-api-key"] == "sk-ant-secret"

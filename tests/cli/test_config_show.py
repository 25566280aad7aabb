"""`ragloop config show` (issue 31, item 2): credentials inside every URL-valued setting are
masked, from the file or the environment, and the output is TOML that reads back to the same
settings (the masked values aside), infinity included."""

from __future__ import annotations

import json
import tomllib

import pytest
from click.testing import CliRunner

from ragloop.cli import main as cli
from ragloop.config import Settings, hash_key, load_settings, mask_url

SECRETS = ("s3cret", "urlpass", "QUERYKEY", "tok3n", "spec-pass", "SIGVALUE", "envpass", "envkey")

EVERY_SECTION = """
[kb]
location = "postgresql://reader:s3cret@db.example/kb?sslmode=require&password=s3cret"
embedder = "default"

[engine]
default = "retrieval"
max_iterations = 4
top_k = 8
confidence_threshold = 0.5

[model]
spec = "openai-compatible:https://bob:spec-pass@llm.example/v1?Sig=SIGVALUE#qwen"
api_key = "sk-very-secret"
base_url = "https://user:urlpass@api.example/v1?API_KEY=QUERYKEY&region=eu&token=tok3n"

[budget]
max_tokens = 20000
max_dollars = 1.5
max_wall_ms = inf
max_iter = 3

[server]
host = "127.0.0.1"
port = 9000
max_body_bytes = 1000
max_question_chars = 500
deadline_s = inf
max_concurrency_per_key = 2
traces = "traces \\"quoted\\" \\u007f.db"
cors_origins = ["http://localhost:3000"]
mcp = false

[server.keys.alice]
hash = "{alice}"
collections = ["public", "two words"]
admin = true
max_concurrency = 1

[mcp]
transport = "http"
host = "127.0.0.1"
port = 8123
"""


pytestmark = pytest.mark.usefixtures("no_ragloop_settings")


def show(path, *extra, env=None):
    result = CliRunner().invoke(cli, ["--config", str(path), "config", "show", *extra], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def same(read_back: Settings, settings: Settings) -> bool:
    """The same settings (where they came from aside)."""
    return read_back.model_dump() == settings.model_dump()


def unmask(data: dict, settings: Settings) -> dict:
    """``data`` read back from the output with the masked values put back."""
    data["kb"]["location"] = settings.kb.location
    data["model"]["spec"] = settings.model.spec
    data["model"]["base_url"] = settings.model.base_url
    data["model"]["api_key"] = settings.model.api_key.get_secret_value()
    for name, key in data["server"]["keys"].items():
        key["hash"] = settings.server.keys[name].hash
    return data


def test_every_section_round_trips_through_tomllib_with_infinity_and_secrets_masked(tmp_path):
    path = tmp_path / "ragloop.toml"
    path.write_text(EVERY_SECTION.format(alice=hash_key("rl-alice")), encoding="utf-8")
    settings = load_settings(path)
    out = show(path)
    for secret in SECRETS:
        assert secret not in out
    assert "sk-very-secret" not in out
    assert "deadline_s = inf" in out
    assert "Infinity" not in out
    parsed = tomllib.loads(out)
    assert parsed["model"]["base_url"] == (
        "https://user:****@api.example/v1?API_KEY=****&region=eu&token=****"
    )
    assert parsed["model"]["spec"] == (
        "openai-compatible:https://bob:****@llm.example/v1?Sig=****#qwen"
    )
    assert parsed["kb"]["location"] == (
        "postgresql://reader:****@db.example/kb?sslmode=require&password=****"
    )
    assert same(Settings.model_validate(unmask(parsed, settings)), settings)
    as_json = json.loads(show(path, "--json"))
    assert as_json["server"]["deadline_s"] == "inf"
    assert same(Settings.model_validate(unmask(as_json, settings)), settings)


def test_the_defaults_round_trip(tmp_path):
    path = tmp_path / "ragloop.toml"
    path.write_text("", encoding="utf-8")
    assert same(Settings.model_validate(tomllib.loads(show(path))), load_settings(path))


def test_urls_from_the_environment_are_masked(tmp_path):
    path = tmp_path / "ragloop.toml"
    path.write_text('[model]\nspec = "openai:gpt-4o-mini"\n', encoding="utf-8")
    out = show(
        path,
        env={
            "RAGLOOP_MODEL__BASE_URL": "https://me:envpass@api.example/v1?key=envkey",
            "RAGLOOP_MODEL__SPEC": "openai-compatible:https://me:envpass@h.example/v1#m",
            "RAGLOOP_KB": "postgresql://u:envpass@db/kb",
            "RAGLOOP_SERVER__DEADLINE_S": "inf",
        },
    )
    assert "envpass" not in out
    assert "envkey" not in out
    parsed = tomllib.loads(out)
    assert parsed["model"]["base_url"] == "https://me:****@api.example/v1?key=****"
    assert parsed["server"]["deadline_s"] == float("inf")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://h/x?access_token=A&Password=B&secret=C&x=1",
            "https://h/x?access_token=****&Password=****&secret=****&x=1",
        ),
        ("https://lonetoken@h/x", "https://****@h/x"),
        ("https://h/x?keep=1#frag", "https://h/x?keep=1#frag"),
        ("sqlite:///a/kb.db", "sqlite:///a/kb.db"),
        ("not a url, key=value", "not a url, key=value"),
    ],
)
def test_mask_url(url, shown):
    assert mask_url(url) == shown

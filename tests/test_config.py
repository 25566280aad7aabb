"""ragloop.toml and the environment: one place turns settings into objects; one clear error
names a bad key; `ragloop config show` masks secrets; the CLI reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragloop import ConfigError, Document, KnowledgeBase
from ragloop.config import Settings, hash_key, load_settings

FILE = """
[kb]
location = "postgresql://reader:s3cret@db.example/kb"

[engine]
default = "agent"
max_iterations = 4

[model]
spec = "openai:gpt-4o-mini"
api_key = "sk-very-secret"

[budget]
max_tokens = 20000

[server]
port = 9000
max_question_chars = 500

[server.keys.alice]
hash = "{alice}"
collections = ["public"]
"""


pytestmark = pytest.mark.usefixtures("no_ragloop_settings")


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "ragloop.toml"
    path.write_text(FILE.format(alice=hash_key("rl-alice")), encoding="utf-8")
    return path


def test_the_file_is_read_and_the_environment_overrides_it(config, monkeypatch):
    monkeypatch.setenv("RAGLOOP_CONFIG", str(config))
    monkeypatch.setenv("RAGLOOP_SERVER__PORT", "9100")
    monkeypatch.setenv("RAGLOOP_ENGINE__DEFAULT", "rag")
    monkeypatch.setenv("RAGLOOP_SERVER__KEYS__BOB__HASH", hash_key("rl-bob"))
    monkeypatch.setenv("RAGLOOP_SERVER__KEYS__BOB__COLLECTIONS", '["secret"]')
    settings = load_settings()
    assert settings.source == str(config)
    assert settings.server.port == 9100
    assert settings.server.max_question_chars == 500
    assert settings.engine.default == "rag"
    assert settings.engine.settings("rag") == {"max_iterations": 4}
    assert settings.server.keys["alice"].collections == ["public"]
    assert settings.server.keys["bob"].collections == ["secret"]
    assert settings.budget.budget().max_tokens == 20000
    assert settings.model.options() == {"api_key": "sk-very-secret"}
    assert "RAGLOOP_SERVER__PORT" in settings.overrides


def test_without_a_file_every_setting_has_its_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert settings == Settings()
    assert settings.server.host == "127.0.0.1"
    assert settings.budget.budget() is None


def test_ragloop_kb_still_names_the_knowledge_base(config, monkeypatch):
    monkeypatch.setenv("RAGLOOP_KB", "/data/kb.sqlite")
    assert load_settings(config).kb.location == "/data/kb.sqlite"


@pytest.mark.parametrize(
    ("text", "env", "key", "where"),
    [
        ('[server]\nport = "high"\n', {}, "server.port", "ragloop.toml"),
        ("[engine]\ndefault = 'fast'\n", {}, "engine.default", "ragloop.toml"),
        ("[server]\nmax_body = 1\n", {}, "server.max_body", "ragloop.toml"),
        ("[server.keys.x]\nhash = 'rl-plain-key'\n", {}, "server.keys.x.hash", "ragloop.toml"),
        (
            "",
            {"RAGLOOP_SERVER__DEADLINE_S": "-1"},
            "server.deadline_s",
            "$RAGLOOP_SERVER__DEADLINE_S",
        ),
        ("[budget\n", {}, "config", "not valid TOML"),
    ],
)
def test_a_bad_setting_is_one_error_naming_the_key_and_where_it_came_from(
    tmp_path, monkeypatch, text, env, key, where
):
    path = tmp_path / "ragloop.toml"
    path.write_text(text, encoding="utf-8")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.field == key
    assert where in str(caught.value)


def test_a_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no config file"):
        load_settings(tmp_path / "absent.toml")


def ragloop(*args, env=None, cwd=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAGLOOP_")}
    return subprocess.run(
        [sys.executable, "-m", "ragloop", *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        cwd=cwd,
        timeout=300,
    )


def test_config_show_prints_the_effective_settings_with_secrets_masked(config):
    shown = ragloop("config", "show", "--config", str(config), env={"RAGLOOP_SERVER__PORT": "9100"})
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert f"# from: {config}" in out
    assert "# environment: RAGLOOP_SERVER__PORT" in out
    assert "port = 9100" in out
    assert "sk-very-secret" not in out
    assert 'api_key = "****"' in out
    assert "s3cret" not in out
    assert "reader:****@db.example" in out
    assert hash_key("rl-alice") not in out
    as_json = json.loads(ragloop("--config", str(config), "config", "show", "--json").stdout)
    assert as_json["engine"]["default"] == "agent"
    assert as_json["model"]["api_key"] == "****"


def test_config_show_names_a_bad_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nport = -5\n", encoding="utf-8")
    shown = ragloop("config", "show", env={"RAGLOOP_CONFIG": str(bad)})
    assert shown.returncode == 2
    assert "server.port" in shown.stderr
    assert "Traceback" not in shown.stderr


def test_new_key_prints_the_key_once_and_a_config_entry_with_its_hash_only(tmp_path):
    made = ragloop("config", "new-key", "alice", "--collection", "public", "--admin")
    assert made.returncode == 0, made.stderr
    key = made.stderr.split("key: ", 1)[1].split()[0]
    assert key.startswith("rl-")
    assert key not in made.stdout
    path = tmp_path / "ragloop.toml"
    path.write_text(made.stdout, encoding="utf-8")
    entry = load_settings(path).server.keys["alice"]
    assert entry.hash == hash_key(key)
    assert entry.collections == ["public"]
    assert entry.admin


def test_the_cli_reads_the_knowledge_base_and_the_engine_from_the_config(tmp_path):
    with KnowledgeBase(tmp_path / "kb.sqlite", embedder="hash") as kb:
        kb.add_documents(
            [Document(source="skylark.md", text="The Skylark 2 weighs 2.1 kg packed.")]
        )
    path = tmp_path / "ragloop.toml"
    path.write_text(
        f'[kb]\nlocation = "{tmp_path / "kb.sqlite"}"\n\n[engine]\ndefault = "agent"\n',
        encoding="utf-8",
    )
    asked = ragloop("--config", str(path), "ask", "What does the Skylark 2 weigh?", "--json")
    assert asked.returncode == 0, asked.stderr
    result = json.loads(asked.stdout)
    assert "tool_history" in result  # the agent answered
    assert "2.1 kg" in result["answer"]
    found = ragloop("search", "Skylark weight", env={"RAGLOOP_CONFIG": str(path)})
    assert found.returncode == 0, found.stderr
    assert "skylark.md" in found.stdout


def test_the_docker_compose_config_is_valid():
    docs = Path(__file__).resolve().parents[1] / "docs"
    settings = load_settings(docs / "ragloop.docker.toml")
    assert settings.server.port == 8000
    compose = (docs / "docker-compose.yml").read_text(encoding="utf-8")
    assert "RAGLOOP_CONFIG: /src/docs/ragloop.docker.toml" in compose
    assert "ragloop serve --host 0.0.0.0" in compose


CREDENTIALS = [
    ("https://bucket.s3.example/kb.sqlite?X-Amz-Signature=", "f1e2d3c4b5a6f7e8"),
    ("https://gitlab.example/api/v4/models?private_token=", "glpat-abcdefgh1234"),
    ("https://models.example/v1?auth=", "a1b2c3d4e5f6g7h8"),
    ("https://models.example/v1?jwt=", "header.payload.signature"),
    ("https://models.example/v1?bearer=", "opaque-token-value-1"),
    ("https://models.example/v1?pass=", "correct-horse-battery"),
    ("https://models.example/v1?session=", "sess-0123456789abcdef"),
    ("https://models.example/callback#access_token=", "ya29.a0AfH6SMBx"),
]


@pytest.mark.parametrize(("url", "secret"), CREDENTIALS)
def test_every_kind_of_url_credential_is_masked_in_config_and_logs(url, secret):
    """Issue 58, item 10: the parameters a cloud or an OAuth redirect carries a credential in."""
    from ragloop.config import mask_url
    from ragloop.core.redaction import redact

    text = f"model at {url}{secret}&page=2 failed"
    for masked in (mask_url(text), redact(text)):
        assert secret not in masked
        assert "page=2" in masked  # the rest of the URL kept


def test_config_show_masks_a_signed_url(tmp_path):
    path = tmp_path / "ragloop.toml"
    signed = "https://bucket.s3.example/v1?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=f1e2d3c4"
    path.write_text(f'[model]\nspec = "openai-compatible:{signed}#m"\n', encoding="utf-8")
    shown = ragloop("config", "show", "--config", str(path))
    assert shown.returncode == 0, shown.stderr
    assert "f1e2d3c4" not in shown.stdout
    assert "AKIAEXAMPLE" not in shown.stdout

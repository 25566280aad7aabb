"""Issue 17, item 13: no credential leaves through an error, a trace, a log line, a span or the
CLI, and a server's error body is content (withheld from telemetry unless capture is on).

The model's base URL carries credentials (``http://user:SECRET@host/v1?key=SECRET``) and a
server on loopback answers with an error body that echoes the request's headers: a bearer key
of the usual shape and the model's own key, which has no recognisable shape (it is masked
because the provider registered it). Each engine runs against it with capture off and on; every
sink is searched for every secret.
"""

from __future__ import annotations

import io
import json
import logging

import pytest
from click.testing import CliRunner

from ragloop import (
    AgentLoop,
    Document,
    KnowledgeBase,
    LLMGenerator,
    LLMUnderstander,
    LoopConfig,
    ModelHTTPError,
    OpenAICompatibleModel,
    RAGLoop,
    RetrievalLoop,
    RetrievalLoopConfig,
    StopReason,
)
from ragloop.cli import main as cli
from ragloop.components.evaluators import HeuristicEvaluator
from ragloop.components.reformulators import HeuristicReformulator
from ragloop.core.redaction import redact, redact_all, register_secret
from ragloop.observability import install_json_logging, set_trace_content
from ragloop.observability.traces import TraceRecorder, TraceStore
from ragloop.providers import RetryPolicy, override_allow_model_requests
from tests.providers.server import LoopbackServer, Reply

URL_PASSWORD = "urlpassword4242"
QUERY_KEY = "querykey77777777"
MODEL_KEY = "plainkeyvalue42"  # no known key shape: masked because it was registered
BEARER = "sk-live-abcdefghijklmnop1234"
SECRETS = [URL_PASSWORD, QUERY_KEY, MODEL_KEY, BEARER]
BODY_MARK = "bodymarkzebra"  # the server's own words: content


def _error_reply(status: int = 401) -> Reply:
    return Reply(
        status,
        json={
            "error": {"message": f"invalid key {MODEL_KEY} ({BODY_MARK})"},
            "echo": {"authorization": f"Bearer {BEARER}", "x-api-key": MODEL_KEY},
        },
    )


@pytest.fixture
def server():
    running = LoopbackServer().start()
    yield running
    running.stop()


def _model(server: LoopbackServer) -> OpenAICompatibleModel:
    host = server.url.split("://", 1)[1]
    return OpenAICompatibleModel(
        "gpt-4o-mini",
        base_url=f"http://reader:{URL_PASSWORD}@{host}?key={QUERY_KEY}",
        api_key=MODEL_KEY,
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0, max_backoff_s=0, jitter_s=0),
    )


def _kb() -> KnowledgeBase:
    kb = KnowledgeBase.in_memory(embedder=None)
    kb.add_documents([Document(text="The Skylark tent weighs two kilograms.", source="t.md")])
    return kb


def _runs(model: OpenAICompatibleModel, kb: KnowledgeBase):
    retriever = kb.retriever(mode="bm25")
    yield (
        "rag",
        lambda: RAGLoop(
            retriever,
            LLMGenerator(model=model),
            HeuristicEvaluator(),
            HeuristicReformulator(),
            LoopConfig(on_error="stop"),
        ).run("How heavy is the Skylark tent?"),
    )
    yield "agent", lambda: AgentLoop(model, retriever).run("How heavy is the Skylark tent?")
    yield (
        "retrieval",
        lambda: RetrievalLoop(
            retriever,
            understander=LLMUnderstander(model=model),
            config=RetrievalLoopConfig(on_error="stop"),
        ).run("How heavy is the Skylark tent?"),
    )


def _span_text(spans) -> str:
    parts = []
    for span in spans.get_finished_spans():
        parts.append(span.name + json.dumps(dict(span.attributes or {}), default=str))
        parts.append(str(span.status.description))
        for event in span.events:
            parts.append(event.name + json.dumps(dict(event.attributes or {}), default=str))
    return "\n".join(parts)


@pytest.mark.parametrize("capture", [False, True])
def test_no_secret_reaches_errors_traces_logs_or_spans(server, spans, trace_store, capture):
    set_trace_content(capture)
    logs = io.StringIO()
    handler = install_json_logging(logs)
    store = trace_store
    try:
        with override_allow_model_requests("loopback"):
            model = _model(server)
            for name, run in _runs(model, _kb()):
                # a 503 first (retried, and logged), then the 401 that ends the run
                server.reply(Reply(503, body=f"busy {BODY_MARK} {MODEL_KEY}"), _error_reply())
                spans.clear()
                with TraceRecorder(store, meta={"model": model.base_url}) as recorder:
                    result = run()
                assert result.stop_reason == StopReason.ERROR, name
                assert result.error, name
                assert not any(s in result.error for s in SECRETS), (name, result.error)
                assert BODY_MARK in result.error  # the user's own result keeps the reason
                stored = "\n".join(
                    json.dumps(store.get(r.id).model_dump(mode="json"))
                    for r in recorder.records.values()
                )
                telemetry = {"trace store": stored, "spans": _span_text(spans)}
                for sink, text in telemetry.items():
                    assert not [s for s in SECRETS if s in text], (name, sink)
                    assert (BODY_MARK in text) is capture, (name, sink)
                assert "***" in stored  # the URL is recorded, masked
    finally:
        logging.getLogger("ragloop").removeHandler(handler)
        store.close()
    lines = logs.getvalue()
    assert "retrying a model request" in lines
    assert not [s for s in SECRETS if s in lines]
    assert (BODY_MARK in lines) is capture


def test_the_cli_shows_no_secret(server, tmp_path):
    kb_path = tmp_path / "kb.sqlite"
    with KnowledgeBase(kb_path, embedder=None) as kb:
        kb.add_documents([Document(text="The Skylark tent weighs two kilograms.", source="t.md")])
    host = server.url.split("://", 1)[1]
    spec = f"openai-compatible:http://reader:{URL_PASSWORD}@{host}?key={QUERY_KEY}#gpt-4o-mini"
    server.reply(*[_error_reply(400)] * 4)
    with override_allow_model_requests("loopback"):
        result = CliRunner().invoke(
            cli, ["ask", "How heavy is the Skylark tent?", "--kb", str(kb_path), "--model", spec]
        )
    assert BODY_MARK in result.output or "HTTP 400" in result.output, result.output
    assert not [s for s in SECRETS if s in result.output], result.output
    traces = TraceStore(tmp_path / "kb.traces.sqlite")
    stored = json.dumps([t.model_dump(mode="json") for t in traces.list()])
    assert stored != "[]"
    assert not [s for s in SECRETS if s in stored]


def test_the_model_repr_and_errors_mask_the_url(server):
    with override_allow_model_requests("loopback"):
        model = _model(server)
        server.reply(_error_reply(400))
        with pytest.raises(ModelHTTPError) as caught:
            model.complete([])
    assert not [s for s in SECRETS if s in repr(model) + str(caught.value)]


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("https://bob:hunter2hunter2@example.com/v1", "hunter2hunter2"),
        ("https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/x.git", "ghp_abcdef"),
        ("GET /v1?api_key=abc123def456&x=1", "abc123def456"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijkl", "eyJ"),
        ('{"x-api-key": "k3y-with-no-shape"}', "k3y-with-no-shape"),
        ("key AIzaSyA1234567890abcdefghijklmnopqrstu leaked", "AIzaSy"),
        ("sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ was sent", "sk-ant"),
    ],
)
def test_known_secret_shapes_are_masked(text, secret):
    assert secret not in redact(text)


@pytest.mark.parametrize(
    "text", ["monkey=banana12345", "the key is fine", "HTTP 500 from http://127.0.0.1:80/v1"]
)
def test_ordinary_text_is_left_alone(text):
    assert redact(text) == text


def test_a_secret_registered_after_a_text_was_redacted_is_masked_in_it():
    # a cache of redacted texts (ids, sources, titles repeat event after event) must not keep
    # answering for a text with what it was before its secret was known
    secret = "lateregistered9137"
    text = f"conn {secret}"
    assert redact(text) == text
    assert redact_all({"a": [text]}) == {"a": [text]}
    register_secret(secret)
    assert secret not in redact(text)
    assert secret not in "\n".join(_strings(redact_all({"a": [text]})))


# registered secrets with characters repr() escapes (a backslash, both quotes, a tab), with no
# credential word near them; then key shapes and URL credentials
ESCAPED_SECRETS = ["Zq\\9vLm2Xr4pw", "quote'and\"dbl-9876", "tab\tmidway-4242"]


@pytest.mark.parametrize(
    ("value", "secrets"),
    [
        ({"plain": ESCAPED_SECRETS[0], "n": 3}, ESCAPED_SECRETS[:1]),
        ({"nested": [{"deep": ("x", f'it\'s "fine" {ESCAPED_SECRETS[1]}')}]}, ESCAPED_SECRETS[1:2]),
        ([("a", [f"a {ESCAPED_SECRETS[2]} b"])], ESCAPED_SECRETS[2:]),
        ({"shape": {"k": ["sk-live-abcdefghijklmnop1234"]}}, ["sk-live-abcdef"]),
        ({"url": ("https://bob:hunter2hunter2@example.com/v1",)}, ["hunter2hunter2"]),
    ],
)
def test_redact_all_masks_nested_values_and_keeps_the_structure(value, secrets):
    for secret in ESCAPED_SECRETS:
        register_secret(secret)
    redacted = redact_all(value)
    assert not [s for s in secrets if s in "\n".join(_strings(redacted))]
    assert type(redacted) is type(value)
    if isinstance(value, dict):
        assert list(redacted) == list(value)
        assert redacted.get("n") == value.get("n")


def _strings(value):
    """Every string in ``value``, as it is (json.dumps or repr would escape a backslash)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []

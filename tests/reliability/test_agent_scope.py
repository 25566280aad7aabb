"""Issue 17, item 14: the offline AgentLoop never learns another collection's words, and tool
arguments a model writes as a Python literal (``{1: 2}``) cannot break the run.

``AgentLoop.offline(kb, collections="public")`` built its controller's vocabulary (related
terms, substitutes, document lookups) from the whole knowledge base, so 2 of 3 questions sent
queries holding words found only in the "secret" collection. ``parse_arguments('{1: 2}')``
returned an integer key, which made the next request invalid and ended the run with an error.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragloop import AgentLoop, Document, KnowledgeBase, OpenAICompatibleModel, StopReason
from ragloop.core.text import is_content_word, tokenize
from ragloop.providers import override_allow_model_requests
from ragloop.providers.tools import parse_arguments
from tests.providers.server import LoopbackServer, Reply
from tests.providers.wire import openai_completion

PUBLIC = [
    Document(
        text="Our tents ship within five days. Returns are accepted for thirty days.",
        source="shipping",
        title="Shipping",
    ),
    Document(text="Tent poles are aluminium and weigh 400 grams.", source="poles", title="Poles"),
]
SECRET = [
    Document(
        text="Project zanzibar: the tents margin is quixotically 62 percent. Supplier xylophone "
        "ships tents.",
        source="margins",
        title="Margins",
    ),
    Document(
        text="Zanzibar tents codename quixotic, supplier xylophone, contract renewal.",
        source="contracts",
        title="Contracts",
    ),
]
QUESTIONS = [
    "what is the margin on tents?",
    "which supplier ships tents?",
    "what does the tent contract say?",
    "how heavy are tent poles?",
]


def _words(documents: list[Document]) -> set[str]:
    return {w for d in documents for w in tokenize(f"{d.title} {d.text}")}


@pytest.mark.parametrize("embedder", ["hash", None])
@pytest.mark.parametrize("allowed", ["public", ["public"]])
def test_the_offline_controller_searches_with_the_allowed_collections_words_only(embedder, allowed):
    kb = KnowledgeBase.in_memory(embedder=embedder)
    kb.add_documents(PUBLIC, collection="public")
    kb.add_documents(SECRET, collection="secret")
    only_secret = _words(SECRET) - _words(PUBLIC)
    loop = AgentLoop.offline(kb, collections=allowed)
    for question in QUESTIONS:
        result = loop.run(question)
        queries = [e.args.get("query", "") for e in result.tool_history if e.tool == "search"]
        assert len(queries) > 0
        searched = {w for q in queries for w in tokenize(str(q))} - set(tokenize(question))
        assert not searched & only_secret, (question, queries)
        assert all(c.metadata.get("collection") == "public" for c in result.chunks)
        # a give-up names the question's own words it could not find ("supplier") and its score
        # ("0.62"): not a leak; a content word only the secret documents have would be
        said = set(tokenize(result.answer or "")) - set(tokenize(question))
        secret_words = {w for w in only_secret if w.isalpha() and is_content_word(w)}
        assert not said & secret_words, (question, result.answer)


# -- tool arguments written as Python literals --------------------------------------------------

PYTHON_LITERALS = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=10),
        st.binary(max_size=5),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.frozensets(st.integers(), max_size=3),
        st.dictionaries(
            st.one_of(st.integers(), st.text(max_size=5), st.tuples(st.integers())),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=12,
)


def _json_safe(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_safe(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


@given(st.dictionaries(st.one_of(st.integers(), st.text(max_size=5)), PYTHON_LITERALS, max_size=4))
def test_arguments_written_as_a_python_literal_become_json(literal):
    arguments = parse_arguments(repr(literal), "search")
    assert _json_safe(arguments)
    assert json.loads(json.dumps(arguments)) == arguments


@pytest.mark.parametrize("written", ["{1: 2}", "{'query': 'tents', 2: (3, 4)}"])
def test_an_agent_run_survives_arguments_with_non_string_keys(written):
    server = LoopbackServer().start()
    try:
        server.reply(
            Reply(json=openai_completion(None, tool_calls=[("c1", "search", written)])),
            Reply(json=openai_completion(None, tool_calls=[("c2", "answer", '{"text": "Done."}')])),
        )
        with override_allow_model_requests("loopback"):
            model = OpenAICompatibleModel("gpt-4o-mini", base_url=server.url, api_key="k")
            kb = KnowledgeBase.in_memory(embedder=None)
            kb.add_documents(PUBLIC)
            result = AgentLoop(model, kb.retriever()).run("tents?")
    finally:
        server.stop()
    assert result.stop_reason == StopReason.ANSWERED, result.error
    assert result.answer == "Done."
    second = server.received[1].body["messages"]
    sent = next(m for m in second if m.get("tool_calls"))["tool_calls"][0]["function"]
    assert all(isinstance(k, str) for k in json.loads(sent["arguments"]))
